"""Models that refused our memory tools are remembered for a while, in a bounded map."""

from memory_proxy.tools.refusals import FORGET_AFTER_S, MAX_MODELS, ToolLessModels


def test_a_model_is_tool_less_for_a_while_then_offered_tools_again() -> None:
    now = [0.0]
    models = ToolLessModels(clock=lambda: now[0])
    models.add("small-model")
    assert "small-model" in models and "other-model" not in models
    now[0] = FORGET_AFTER_S + 1
    assert "small-model" not in models


def test_the_map_stays_bounded_whatever_names_clients_send() -> None:
    models = ToolLessModels(clock=lambda: 0.0)
    for i in range(MAX_MODELS + 50):
        models.add(f"model-{i}")
    assert f"model-{MAX_MODELS + 49}" in models
    assert sum(f"model-{i}" in models for i in range(MAX_MODELS + 50)) == MAX_MODELS
