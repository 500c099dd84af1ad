"""The fleet simulator (`thinktier plan`): the real routing and scaling code over simulated replicas."""
