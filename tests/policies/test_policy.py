"""Policy validation as a platform engineer meets it: each kind of mistake gives one precise, located message."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from thinktier.cli import policy as cli_policy
from thinktier.cli.main import build_parser
from thinktier.policies.json_schema import SCHEMA_FILE, policy_json_schema, render_json_schema
from thinktier.policies.loader import DEFAULT_POLICY, PolicyError, load_policy, parse_policy
from thinktier.policies.schema import EngineArgs

POLICIES = Path(__file__).resolve().parents[2] / "policies"
EXAMPLES = sorted([DEFAULT_POLICY, *(POLICIES / "examples").glob("*.yaml")])

# Line numbers in the assertions below refer to this text.
BASE = """\
version: 1
tiers:
  reasoning:
    model: builtin:smollm2-135m-think
    pool: {accelerator: cpu, num_cpus: 0.5}
    max_prompt_tokens: 512
    engine:
      max_model_len: 2048
      kv_cache_memory_gib: 0.25
      kv_cache_dtype: auto
      cpu_threads: "0"
    budgets:
      low: {thinking_tokens: 64, answer_tokens: 128}
      medium: {thinking_tokens: 192, answer_tokens: 192}
      high: {thinking_tokens: 512, answer_tokens: 256}
  chat:
    model: builtin:smollm2-135m-think
    thinking: false
    engine: {max_model_len: 2048, kv_cache_memory_gib: 0.25}
    budgets:
      low: {thinking_tokens: 0, answer_tokens: 128}
      medium: {thinking_tokens: 0, answer_tokens: 192}
      high: {thinking_tokens: 0, answer_tokens: 256}
routing:
  reasoning_tier: reasoning
  chat_tier: chat
  thresholds: {reasoning: 0.3, medium: 0.55, high: 0.8}
tenants:
  acme: {api_key_env: THINKTIER_KEY_ACME}
"""


def edit(old: str, new: str, text: str = BASE) -> str:
    assert text.count(old) == 1, f"{old!r} must occur once in the policy under test"
    return text.replace(old, new)


def problems(text: str) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "p.yaml")
    return [str(p) for p in caught.value.problems]


def test_base_policy_is_valid() -> None:
    policy = parse_policy(BASE, "p.yaml")
    assert sorted(policy.tiers) == ["chat", "reasoning"]


# --- field errors --------------------------------------------------------------------------------


def test_value_not_among_choices_lists_them() -> None:
    assert problems(edit("kv_cache_dtype: auto", "kv_cache_dtype: fp9")) == [
        "p.yaml:10:23: tiers.reasoning.engine.kv_cache_dtype: "
        "'fp9' is not one of 'auto', 'bfloat16', 'fp8', 'fp8_e4m3' or 'fp8_e5m2'"
    ]


def test_misspelt_field_suggests_the_right_one_at_the_key() -> None:
    assert problems(edit("kv_cache_dtype: auto", "kv_cache_dtyp: auto")) == [
        "p.yaml:10:7: tiers.reasoning.engine.kv_cache_dtyp: unknown field 'kv_cache_dtyp'; did you mean 'kv_cache_dtype'?"
    ]


def test_unknown_field_without_a_close_match_lists_the_fields() -> None:
    [problem] = problems(edit("routing:\n", "routing:\n  colour: blue\n"))
    assert problem.startswith("p.yaml:25:3: routing.colour: unknown field 'colour'; the fields here are chat_tier, classifier, ")


def test_missing_required_field_says_what_it_is() -> None:
    assert problems(edit("low: {thinking_tokens: 64, answer_tokens: 128}", "low: {thinking_tokens: 64}")) == [
        "p.yaml:13:12: tiers.reasoning.budgets.low.answer_tokens: required field is missing: add 'answer_tokens:' "
        "(Most visible answer tokens.)"
    ]


def test_number_out_of_range_gives_bound_and_value() -> None:
    assert problems(edit("max_model_len: 2048\n      kv", "max_model_len: 32\n      kv")) == [
        "p.yaml:8:22: tiers.reasoning.engine.max_model_len: must be >= 64, got 32"
    ]


def test_wrong_type_names_expected_and_got() -> None:
    assert problems(edit("max_prompt_tokens: 512", "max_prompt_tokens: lots")) == [
        "p.yaml:6:24: tiers.reasoning.max_prompt_tokens: expected a whole number, got 'lots'"
    ]


def test_number_where_a_string_is_needed_says_to_quote_it() -> None:
    assert problems(edit('cpu_threads: "0"', "cpu_threads: 0")) == [
        "p.yaml:11:20: tiers.reasoning.engine.cpu_threads: expected a string, got 0; quote it: cpu_threads: \"0\""
    ]


def test_a_shared_gpu_share_is_checked_against_the_engine() -> None:
    chat_gpu = "engine: {max_model_len: 2048, kv_cache_memory_gib: 0.25}"
    on_a_share = "pool: {accelerator: gpu, gpu_fraction: 0.25}\n    " + chat_gpu.replace("}", ", gpu_memory_utilization: 0.2}")
    shared = edit(chat_gpu, on_a_share)
    assert parse_policy(shared, "p.yaml").tiers["chat"].pool.gpu_fraction == 0.25
    [greedy] = problems(edit("gpu_memory_utilization: 0.2", "gpu_memory_utilization: 0.9", shared))
    assert "tiers.chat" in greedy and "engine.gpu_memory_utilization: 0.9 exceeds pool.gpu_fraction (0.25)" in greedy
    [split] = problems(edit("kv_cache_memory_gib: 0.25, gpu", "kv_cache_memory_gib: 0.25, tensor_parallel_size: 2, gpu", shared))
    assert "pool.gpu_fraction: a replica can share a GPU only with engine.tensor_parallel_size 1 (got 2)" in split
    cpu_pool = "pool: {accelerator: cpu, num_cpus: 0.5}"
    [cpu] = problems(edit(cpu_pool, cpu_pool.replace("}", ", gpu_fraction: 0.5}")))
    assert "pool.gpu_fraction: applies to GPU pools only" in cpu


def test_invalid_mapping_key_lists_valid_keys() -> None:
    extreme = "      extreme: {thinking_tokens: 1, answer_tokens: 1}\n"
    text = edit("    budgets:\n      low: {thinking_tokens: 64", f"    budgets:\n{extreme}      low: {{thinking_tokens: 64")
    assert problems(text) == [
        "p.yaml:13:7: tiers.reasoning.budgets.extreme: 'extreme' is not a valid key here; use 'low', 'medium' or 'high'"
    ]


def test_section_of_wrong_kind() -> None:
    routing = BASE[BASE.index("routing:") : BASE.index("tenants:")]
    assert problems(edit(routing, "routing: fast\n")) == [
        "p.yaml:24:10: routing: expected a mapping (key: value lines), got 'fast'"
    ]


def test_api_key_pasted_instead_of_an_env_var_name_is_refused_without_echoing_it() -> None:
    [problem] = problems(edit("api_key_env: THINKTIER_KEY_ACME", "api_key_env: sk-live-7f3a9c"))
    assert problem == (
        "p.yaml:29:23: tenants.acme.api_key_env: must match ^[A-Za-z_][A-Za-z0-9_]*$ "
        "(Environment variable holding the tenant's API key (never the key itself); required for every tenant but "
        "'anonymous', which has none.)"
    )
    assert "sk-live" not in problem


# --- cross-field checks, located at the field they are about -------------------------------------


def test_thresholds_out_of_order() -> None:
    assert problems(edit("{reasoning: 0.3, medium: 0.55, high: 0.8}", "{reasoning: 0.6, medium: 0.55, high: 0.8}")) == [
        "p.yaml:27:15: routing.thresholds: thresholds must be in order reasoning <= medium <= high; got 0.6, 0.55, 0.8"
    ]


def test_budget_beyond_max_model_len() -> None:
    assert problems(edit("high: {thinking_tokens: 512,", "high: {thinking_tokens: 1500,")) == [
        "p.yaml:15:13: tiers.reasoning.budgets.high: max_prompt_tokens + thinking_tokens + answer_tokens + 1 = 2269 "
        "exceeds engine.max_model_len (2048); lower the budget or raise max_model_len"
    ]


def test_route_to_a_tier_that_does_not_exist() -> None:
    assert problems(edit("chat_tier: chat", "chat_tier: chatty")) == [
        "p.yaml:26:14: routing.chat_tier: tier 'chatty' does not exist; tiers are ['chat', 'reasoning']"
    ]


def test_thinking_budget_on_a_tier_without_thinking() -> None:
    assert problems(edit("high: {thinking_tokens: 0,", "high: {thinking_tokens: 10,")) == [
        "p.yaml:23:31: tiers.chat.budgets.high.thinking_tokens: must be 0 on a tier with thinking: false"
    ]


def test_native_kv_offloading_on_a_cpu_tier() -> None:
    assert problems(edit('cpu_threads: "0"', 'cpu_threads: "0"\n      kv_offloading: {mode: native, size_gib: 4}')) == [
        "p.yaml:12:22: tiers.reasoning.engine.kv_offloading: mode 'native' (vLLM's connector) offloads KV only from "
        "CUDA or XPU GPUs; use mode: preempted, which runs on CPU tiers too, or pool.accelerator: gpu",
        "p.yaml:12:47: tiers.reasoning.engine.kv_offloading.size_gib: 4 GiB of offloaded KV and about 2 GiB for the "
        "engine process do not fit pool.memory_gib (4); raise pool.memory_gib to at least 6 or lower size_gib",
    ]


def test_an_objective_the_service_deadline_makes_unreachable() -> None:
    """A request is cut at server.tier_timeout_s: a longer end-to-end objective could never be met."""
    text = BASE + "server: {tier_timeout_s: 120}\nslos:\n  hard: {ttfvt_s: 60, e2e_s: 180}\n"
    assert problems(text) == [
        "p.yaml:32:30: slos.hard.e2e_s: 180 s exceeds server.tier_timeout_s (120 s), which ends such a request first; "
        "raise tier_timeout_s to at least 180 or lower the objective"
    ]


def test_a_first_visible_token_objective_after_the_last_token_one() -> None:
    assert problems(BASE + "slos:\n  easy: {ttfvt_s: 5, e2e_s: 4}\n") == [
        "p.yaml:31:19: slos.easy.ttfvt_s: 5 s exceeds e2e_s (4 s): the first visible token cannot come after the last; "
        "lower ttfvt_s or raise e2e_s"
    ]


def test_replica_bounds_reversed() -> None:
    assert problems(edit("    max_prompt_tokens: 512", "    replicas: {min: 3, max: 2}\n    max_prompt_tokens: 512")) == [
        "p.yaml:6:15: tiers.reasoning.replicas: min (3) must not exceed max (2)"
    ]


# --- YAML-level problems -------------------------------------------------------------------------


def test_duplicate_key_is_an_error_not_a_silent_override() -> None:
    twice = "  acme: {api_key_env: A}\n  acme: {api_key_env: B}\n"
    assert problems(edit("  acme: {api_key_env: THINKTIER_KEY_ACME}\n", twice)) == [
        "p.yaml:30:3: tenants.acme: duplicate key 'acme' (first given on line 29); "
        "YAML would silently keep only this one, so remove one of them"
    ]


def test_tab_indentation() -> None:
    assert problems(edit("  acme: {", "\tacme: {")) == [
        "p.yaml:29:1: not valid YAML: found character '\\t' that cannot start any token (while scanning for the next token); "
        "indent with spaces; YAML does not allow tabs"
    ]


def test_broken_flow_mapping() -> None:
    assert problems(edit("{reasoning: 0.3, medium: 0.55, high: 0.8}", "{reasoning: 0.3, medium: 0.55")) == [
        "p.yaml:28:8: not valid YAML: expected ',' or '}', but got ':' (while parsing a flow mapping)"
    ]


@pytest.mark.parametrize("text", ["", "# nothing but a comment\n"])
def test_empty_policy(text: str) -> None:
    assert problems(text) == ["p.yaml:1:1: the policy is empty; it needs at least 'tiers:' (see policies/default.yaml)"]


def test_policy_that_is_not_a_mapping() -> None:
    assert problems("- reasoning\n- chat\n") == [
        "p.yaml:1:1: a policy must be a YAML mapping, got a list; it needs at least 'tiers:' (see policies/default.yaml)"
    ]


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(PolicyError) as caught:
        load_policy(missing)
    assert [str(p) for p in caught.value.problems] == [f"{missing}:1:1: cannot read policy file: No such file or directory"]


def test_every_problem_at_once_in_line_order() -> None:
    text = edit("kv_cache_dtype: auto", "kv_cache_dtype: fp9")
    text = edit("low: {thinking_tokens: 64, answer_tokens: 128}", "low: {thinking_tokens: -1, answer_tokens: 128}", text)
    text = edit("{reasoning: 0.3, medium: 0.55, high: 0.8}", "{reasoning: 0.9, medium: 0.55, high: 0.8}", text)
    text = edit("  acme: {api_key_env: THINKTIER_KEY_ACME}\n", "  acme: {api_key_env: A}\n  acme: {api_key_env: B}\n", text)
    found = problems(text)
    assert [p.split(": ")[0:2] for p in found] == [
        ["p.yaml:10:23", "tiers.reasoning.engine.kv_cache_dtype"],
        ["p.yaml:13:30", "tiers.reasoning.budgets.low.thinking_tokens"],
        ["p.yaml:27:15", "routing.thresholds"],
        ["p.yaml:30:3", "tenants.acme"],
    ]
    with pytest.raises(PolicyError, match=r"invalid policy \(4 problems\)"):
        parse_policy(text, "p.yaml")


# --- the shipped policies ------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_shipped_policies_validate(path: Path) -> None:
    load_policy(path)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_shipped_policies_pass_the_editor_schema(path: Path) -> None:
    jsonschema.validate(yaml.safe_load(path.read_text()), policy_json_schema())


def test_production_example_is_the_h100_fleet_it_claims() -> None:
    policy = load_policy(POLICIES / "examples" / "production-h100.yaml")
    reasoning, chat = policy.tiers[policy.routing.reasoning_tier], policy.tiers[policy.routing.chat_tier]
    assert "DeepSeek-R1-Distill-Qwen-32B" in reasoning.model
    assert (reasoning.pool.accelerator, reasoning.pool.accelerator_type) == ("gpu", "H100")
    assert reasoning.engine.kv_cache_dtype == "fp8"
    assert not reasoning.engine.kv_offloading.enabled  # both offload modes lost on a GPU (loadtest/results/gpu-offload)
    assert reasoning.engine.scheduling_policy == "priority" and reasoning.engine.max_model_len == 32768
    assert chat.pool.accelerator_type != "H100" and not chat.thinking
    assert all(t.api_key_env.startswith("THINKTIER_KEY_") for t in policy.tenants.values())


def test_single_pool_example_is_one_tier_without_classifier() -> None:
    policy = load_policy(POLICIES / "examples" / "single-pool.yaml")
    default = load_policy(DEFAULT_POLICY)
    assert list(policy.tiers) == [policy.routing.reasoning_tier]
    assert policy.routing.chat_tier is None and not policy.routing.classifier.enabled
    assert policy.tiers["reasoning"].model == default.tiers[default.routing.reasoning_tier].model


# --- JSON Schema ---------------------------------------------------------------------------------


def test_committed_json_schema_is_current() -> None:
    assert SCHEMA_FILE.read_text() == render_json_schema(), (
        "policies/policy.schema.json is stale: run `thinktier policy schema -o policies/policy.schema.json`"
    )


def test_json_schema_flags_what_an_editor_should() -> None:
    schema = policy_json_schema()
    data = yaml.safe_load(edit("kv_cache_dtype: auto", "kv_cache_dtype: fp9"))
    with pytest.raises(jsonschema.ValidationError, match="'fp9' is not one of"):
        jsonschema.validate(data, schema)
    engine = schema["$defs"]["EngineArgs"]["properties"]
    assert engine["kv_cache_dtype"]["description"] == EngineArgs.model_fields["kv_cache_dtype"].description
    assert engine["max_model_len"]["default"] == EngineArgs.model_fields["max_model_len"].default


# --- the command ---------------------------------------------------------------------------------


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    args = build_parser().parse_args(argv)
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_validate_command_lists_problems_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit("chat_tier: chat", "chat_tier: chatty"))
    code, out, err = run_cli(["policy", "validate", str(DEFAULT_POLICY), str(bad)], capsys)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"{DEFAULT_POLICY}: OK: 2 tiers: reasoning (builtin:smollm2-135m-think on cpu")
    assert lines[1] == f"{bad}:26:14: routing.chat_tier: tier 'chatty' does not exist; tiers are ['chat', 'reasoning']"
    assert err == f"{bad}: 1 problem\n"


def test_validate_command_summarizes_valid_files(capsys: pytest.CaptureFixture[str]) -> None:
    single = POLICIES / "examples" / "single-pool.yaml"
    code, out, _ = run_cli(["policy", "validate", str(single)], capsys)
    assert code == 0
    assert out == (
        f"{single}: OK: 1 tier: reasoning (builtin:smollm2-135m-think on cpu, replicas 1-1, thinking); "
        "requests naming no model: no classifier: -> reasoning (effort from the request, else medium); 0 tenants\n"
    )


def test_schema_command_writes_the_committed_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "policy.schema.json"
    assert run_cli(["policy", "schema", "-o", str(target)], capsys)[0] == 0
    assert json.loads(target.read_text()) == json.loads(SCHEMA_FILE.read_text())
    code, out, _ = run_cli(["policy", "schema"], capsys)
    assert code == 0 and out == render_json_schema()


def test_apply_command_refuses_an_invalid_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit("kv_cache_dtype: auto", "kv_cache_dtype: fp9"))
    code, out, err = run_cli(["policy", "apply", str(bad), "--configmap", "thinktier-policy", "--namespace", "ml"], capsys)
    assert code == 1
    assert "tiers.reasoning.engine.kv_cache_dtype: 'fp9' is not one of" in out
    assert "not applied" in err


def test_summary_names_routes_of_a_two_tier_policy() -> None:
    summary = cli_policy.summarize(load_policy(DEFAULT_POLICY))
    assert "requests naming no model: score >= 0.3 -> reasoning (medium >= 0.6, high >= 0.8), below -> chat" in summary


def test_empty_thinking_on_a_thinking_tier_is_refused_with_the_fix() -> None:
    found = problems(edit("  reasoning:\n", "  reasoning:\n    empty_thinking: true\n"))
    assert found == ["p.yaml:4:21: tiers.reasoning.empty_thinking: applies to tiers with thinking: false (a thinking tier "
                     "opens the section itself); remove it or set thinking: false"]


# --- lending -------------------------------------------------------------------------------------

LENDING = "tenants:\n  acme: {api_key_env: THINKTIER_KEY_ACME}\nlending:\n  - {lender: chat, borrower: reasoning}\n"


def test_a_tier_that_cannot_think_cannot_lend_to_a_thinking_tier_and_the_error_says_which_way_works() -> None:
    text = BASE.replace("tenants:\n  acme: {api_key_env: THINKTIER_KEY_ACME}\n", LENDING)
    assert problems(text) == [
        "p.yaml:31:5: lending.0: tier 'chat' cannot think (builtin:smollm2-135m-think with thinking: false), so it "
        "cannot run 'reasoning''s requests with their thinking budgets; lending goes one way here (lender: reasoning, "
        "borrower: chat), or serve the borrower's model on 'chat' with empty_thinking: true"
    ]
    reversed_rule = text.replace("{lender: chat, borrower: reasoning}", "{lender: reasoning, borrower: chat}")
    assert parse_policy(reversed_rule, "p.yaml").lending[0].lender == "reasoning"
    same_model = edit("    thinking: false\n", "    thinking: false\n    empty_thinking: true\n", text)
    assert parse_policy(same_model, "p.yaml").lending[0].lender == "chat"


def test_a_lender_must_fit_the_borrowers_largest_request_and_schedule_by_priority() -> None:
    text = BASE.replace("tenants:\n  acme: {api_key_env: THINKTIER_KEY_ACME}\n", LENDING.replace(
        "{lender: chat, borrower: reasoning}", "{lender: reasoning, borrower: chat}"))
    text = edit("      cpu_threads: \"0\"\n", "      cpu_threads: \"0\"\n      scheduling_policy: fcfs\n", text)
    text = edit("engine: {max_model_len: 2048, kv_cache", "engine: {max_model_len: 2048, max_num_seqs: 4, kv_cache", text)
    small = edit("      max_model_len: 2048\n", "      max_model_len: 640\n", text)
    for effort, budget in (("low", "64, answer_tokens: 128"), ("medium", "192, answer_tokens: 192"),
                           ("high", "512, answer_tokens: 256")):
        small = edit(f"{effort}: {{thinking_tokens: {budget}}}", f"{effort}: {{thinking_tokens: 0, answer_tokens: 64}}",
                     small)
    found = problems(small)
    assert found == [
        "p.yaml:32:5: lending.0: tier 'reasoning' has engine.max_model_len 640; 'chat''s largest request needs 1281 "
        "(its max_prompt_tokens + thinking + answer + 1): raise the lender's max_model_len or lower the borrower's budgets",
        "p.yaml:32:5: lending.0: tier 'reasoning' schedules FCFS, so borrowed requests would hold its capacity ahead of "
        "its own; set its engine.scheduling_policy: priority (borrowed requests run at its lowest priority)",
    ]


def test_lending_names_existing_tiers_once() -> None:
    text = BASE.replace("tenants:\n  acme: {api_key_env: THINKTIER_KEY_ACME}\n",
                        "lending:\n  - {lender: reasoning, borrower: chatty}\n  - {lender: reasoning, borrower: reasoning}\n")
    assert problems(text) == [
        "p.yaml:29:35: lending.0.borrower: tier 'chatty' does not exist; tiers are ['chat', 'reasoning']",
        "p.yaml:30:5: lending.1: a tier lends to another tier; lender and borrower are both 'reasoning'",
    ]


# --- shared capacity -----------------------------------------------------------------------------

RANGES = edit("    pool: {accelerator: cpu, num_cpus: 0.5}\n",
              "    pool: {accelerator: cpu, num_cpus: 0.5}\n    replicas: {min: 1, max: 3}\n")
RANGES = edit("    thinking: false\n", "    thinking: false\n    replicas: {min: 1, max: 3}\n", RANGES)


def shared(text: str, pool: str) -> str:
    return text + f"shared_capacity:\n  - {pool}\n"


def test_tiers_share_a_pool_counted_in_their_devices() -> None:
    policy = parse_policy(shared(RANGES, "{tiers: [reasoning, chat], total: 3}"), "p.yaml")
    assert policy.shared_capacity[0].total == 3  # reasoning replicas hold 0.5 CPUs, chat 1: mins 1.5, maxes 4.5


def test_a_shared_pool_names_existing_tiers_each_in_one_pool() -> None:
    assert problems(shared(RANGES, "{tiers: [reasoning, chatty], total: 3}")) == [
        "p.yaml:33:13: shared_capacity.0.tiers: tier 'chatty' does not exist; tiers are ['chat', 'reasoning']"
    ]
    twice = shared(RANGES, "{tiers: [reasoning, chat], total: 3}") + "  - {tiers: [chat, reasoning], total: 3}\n"
    assert problems(twice) == [
        "p.yaml:34:13: shared_capacity.1.tiers: ['reasoning', 'chat'] already share an earlier pool; a tier shares one pool"
    ]


def test_a_shared_pool_needs_tiers_that_can_move_and_a_total_that_holds_their_mins_and_binds() -> None:
    assert problems(shared(BASE, "{tiers: [reasoning, chat], total: 1.5}")) == [
        "p.yaml:31:13: shared_capacity.0.tiers: ['reasoning', 'chat'] have a fixed replica count (replicas.min == max), so "
        "nothing can move between them and the pool; give each a range or leave it out",
        "p.yaml:31:39: shared_capacity.0.total: 1.5 CPUs holds the tiers' replicas.max together (1.5), so the pool never "
        "limits them; lower total below 1.5 or raise their max",
    ]
    assert problems(shared(RANGES, "{tiers: [reasoning, chat], total: 1}")) == [
        "p.yaml:33:39: shared_capacity.0.total: 1 CPUs is below the tiers' replicas.min together (1.5); raise total to at "
        "least 1.5 or lower their min"
    ]


def test_tiers_on_different_gpu_types_cannot_share_a_pool() -> None:
    gpus = edit("    pool: {accelerator: cpu, num_cpus: 0.5}\n", "    pool: {accelerator: gpu, accelerator_type: H100}\n", RANGES)
    gpus = edit("      cpu_threads: \"0\"\n", "", gpus)
    gpus = edit("    thinking: false\n", "    thinking: false\n    pool: {accelerator: gpu, accelerator_type: L4}\n", gpus)
    assert problems(shared(gpus, "{tiers: [reasoning, chat], total: 4}")) == [
        "p.yaml:33:13: shared_capacity.0.tiers: tiers of one pool run on one kind of device (pool.accelerator and "
        "pool.accelerator_type); got reasoning: gpu H100, chat: gpu L4. A device cannot move between types: share "
        "within each type"
    ]
    same_type = gpus.replace("accelerator_type: L4", "accelerator_type: H100")
    assert parse_policy(shared(same_type, "{tiers: [reasoning, chat], total: 4}"), "p.yaml").shared_capacity
