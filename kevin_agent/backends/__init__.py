"""Model backends: ``vllm`` (in-process), ``openai`` (any OpenAI-compatible HTTP endpoint),
``scripted`` (recorded responses). Each implements ``base.Backend``; heavy imports are lazy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kevin_agent.errors import UserInputError

if TYPE_CHECKING:
    from kevin_agent.backends.base import Backend
    from kevin_agent.config import BackendSettings


def make_backend(settings: BackendSettings) -> Backend:
    """The backend ``settings.backend`` names; UserInputError / EnvironmentProblem as one line."""
    if settings.backend == "openai":
        from kevin_agent.backends.openai_backend import OpenAIBackend

        return OpenAIBackend(settings)
    if settings.backend == "vllm":
        from kevin_agent.backends.vllm_backend import VLLMBackend

        return VLLMBackend(settings)
    if settings.backend == "scripted":
        from kevin_agent.backends.scripted import ScriptedBackend

        if not settings.script:
            raise UserInputError("the scripted backend needs a script file: --script FILE")
        return ScriptedBackend(settings.script, model=settings.model)
    raise UserInputError(
        f"unknown backend {settings.backend!r}: use one of vllm, openai, scripted"
    )
