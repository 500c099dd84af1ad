"""thinktier: a Ray Serve multi-tier cluster for reasoning LLMs behind one OpenAI-compatible endpoint.

The one import package the distribution installs. Its sub-packages are the layers, each a folder at the top of the
repository (this folder links to them), each importing only the layers below it:
policies < deployments < training, cluster < loadtest < cli.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("thinktier")
except PackageNotFoundError:  # run from a source tree that was not installed (the GPU machine's copy)
    __version__ = "0+unknown"
