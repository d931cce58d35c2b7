"""The language server labels verdicts the evaluator does not trust and offers no kernel for them
(issue 23): verdict log lines, the end message and the class diagnostic. Over stdio, replay evaluator."""

from __future__ import annotations

import pytest
from loop_fixtures import write_script
from lsp_support import execute, logs, open_doc, scripted, server_env, wait_until
from lsprotocol import types
from trust_fixtures import write_trust_replay

pytestmark = pytest.mark.timeout(90)

PLAN = {(0, 0): "flag-implausible_speedup", (1, 0): "wrong", (0, 1): "old-provenance_unchecked",
        (1, 1): "broken"}


async def test_untrusted_verdicts_are_labelled_and_never_offered(launch, tmp_path, repo):
    env = server_env(tmp_path, evaluator=f"replay:{write_trust_replay(tmp_path / 'replay.json')}")
    script = str(write_script(tmp_path / "script.json", PLAN))
    editor, _ = await launch(env, repo, init_options=scripted(script))
    client = editor.client
    uri = open_doc(client, repo / "model.py")
    await execute(client, "kevin.optimize", uri, "Model")
    warning = await wait_until(lambda: [m for m in client.messages if m.type == types.MessageType.Warning],
                               what="the end message")
    assert warning[0].message == ("Kevin: no correct kernel for Model (4 candidates evaluated) "
                                  "(2 not trusted: implausible speedup; provenance not checked)")
    assert editor.questions == []  # nothing to accept

    verdict_logs = [m for m in logs(client) if m.startswith("Kevin Model t")]
    assert any(m.startswith("Kevin Model t0.0: timing ok, not trusted: 12.0x faster than PyTorch eager")
               for m in verdict_logs), verdict_logs
    assert any("t0.1: timing ok, not trusted: provenance not checked: no kernels could be listed" in m
               for m in verdict_logs), verdict_logs
    diagnostic = await wait_until(lambda: [d for d in client.diagnostics.get(uri, []) if "done" in d.message],
                                  what="the final diagnostic")
    assert diagnostic[0].message.endswith("(2 not trusted: implausible speedup; provenance not checked)")
