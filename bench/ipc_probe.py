"""What CUDA IPC gives between two processes on this host, across PID namespaces (issue 40).

``python bench/ipc_probe.py OUT.json`` (GPU host, torch + stdlib): an exporter process shares a
device buffer (``cudaIpcGetMemHandle`` through ctypes, the allocation's base and the offset) and an
interprocess event; an opener maps the buffer, waits on the event on its own stream and reads the
values. Tried with each process in the host's PID namespace or a new user+PID namespace of its
own, and both in one new namespace, since legacy CUDA IPC handles are said not to cross PID
namespaces. Then, in the pairing that works, a bracketed batch: the opener's own timing events
around an interprocess "go" event it records and the exporter's "done" event it waits on, against
the exporter's in-process events around the same k calls.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from typing import Any

CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWIPC = 0x10000000, 0x20000000, 0x08000000


class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


def _lib(fragment: str, fallback: str) -> ctypes.CDLL:
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if fragment in path:
                return ctypes.CDLL(path)
    return ctypes.CDLL(fallback)


def _check(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"{what} failed with CUDA error {code}")


def export_buffer(ptr: int) -> tuple[str, int]:
    """(handle hex, offset of ``ptr`` in its allocation)."""
    cuda = _lib("libcuda.so", "libcuda.so.1")
    cudart = _lib("libcudart.so", "libcudart.so.13")
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)),
           "cuMemGetAddressRange")
    handle = IpcHandle()
    _check(cudart.cudaIpcGetMemHandle(ctypes.byref(handle), ctypes.c_void_p(base.value)), "cudaIpcGetMemHandle")
    return bytes(handle.reserved).hex(), ptr - base.value


def open_buffer(handle_hex: str) -> int:
    cudart = _lib("libcudart.so", "libcudart.so.13")
    handle = IpcHandle.from_buffer_copy(bytes.fromhex(handle_hex))
    ptr = ctypes.c_void_p()
    cudart.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), IpcHandle, ctypes.c_uint]
    _check(cudart.cudaIpcOpenMemHandle(ctypes.byref(ptr), handle, ctypes.c_uint(1)), "cudaIpcOpenMemHandle")
    return int(ptr.value or 0)


class _Raw:
    def __init__(self, ptr: int, numel: int) -> None:
        self.__cuda_array_interface__ = {"shape": (numel,), "typestr": "<f4", "data": (ptr, False), "version": 3}


def _send(fd: int, obj: Any) -> None:
    os.write(fd, (json.dumps(obj) + "\n").encode())


def _recv(stream: Any) -> Any:
    line = stream.readline()
    if not line:
        raise EOFError("peer closed")
    return json.loads(line)


def exporter(rfd: int, wfd: int) -> None:
    import torch

    device = torch.device("cuda")
    x = torch.empty(1 << 22, device=device)
    torch.cuda._sleep(20_000_000)
    x.fill_(3.0)
    done = torch.cuda.Event(enable_timing=False, blocking=False, interprocess=True)
    done.record()
    handle, offset = export_buffer(x.data_ptr())
    _send(wfd, {"mem": handle, "offset": offset, "numel": x.numel(), "event": bytes(done.ipc_handle()).hex(),
                "pid": os.getpid()})
    inbox = os.fdopen(rfd)
    opened = _recv(inbox)  # the opener's result
    if not opened.get("ok"):
        return
    a = torch.randn(2048, 2048, device=device)
    go_msg = _recv(inbox)
    go = torch.cuda.Event.from_ipc_handle(device, bytes.fromhex(go_msg["go"]))
    fin = torch.cuda.Event(enable_timing=False, blocking=False, interprocess=True)
    _send(wfd, {"fin": bytes(fin.ipc_handle()).hex()})
    stream = torch.cuda.current_stream()
    while True:
        msg = _recv(inbox)
        if msg.get("stop"):
            return
        k = int(msg["k"])
        stream.wait_event(go)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(k):
            a = torch.mm(a, a) * (1.0 / 2048)
        e1.record()
        fin.record()
        _send(wfd, {"done": True})
        e1.synchronize()
        _send(wfd, {"inproc_ms": e0.elapsed_time(e1)})


def opener(rfd: int, wfd: int) -> None:
    import torch

    device = torch.device("cuda")
    torch.empty(1, device=device)
    inbox = os.fdopen(rfd)
    msg = _recv(inbox)
    result: dict[str, Any] = {"ok": False}
    try:
        started = time.perf_counter()
        ptr = open_buffer(msg["mem"])
        result["open_ms"] = (time.perf_counter() - started) * 1e3
        view = torch.as_tensor(_Raw(ptr + int(msg["offset"]), int(msg["numel"])), device=device)
        event = torch.cuda.Event.from_ipc_handle(device, bytes.fromhex(msg["event"]))
        torch.cuda.current_stream().wait_event(event)
        copy = view.clone()
        torch.cuda.synchronize()
        result["values_ok"] = bool((copy == 3.0).all().item())
        result["ok"] = result["values_ok"]
    except Exception as exc:  # the finding
        result["error"] = f"{type(exc).__name__}: {exc}"
    _send(wfd, result)
    if result["ok"]:
        result["batches"] = _batches(inbox, wfd, device)
    print(json.dumps(result), flush=True)


def _batches(inbox: Any, wfd: int, device: Any) -> list[dict[str, float]]:
    import torch

    go = torch.cuda.Event(enable_timing=False, blocking=False, interprocess=True)
    _send(wfd, {"go": bytes(go.ipc_handle()).hex()})
    fin = torch.cuda.Event.from_ipc_handle(device, bytes.fromhex(_recv(inbox)["fin"]))
    stream = torch.cuda.current_stream()
    rows = []
    for k in (1, 1, 4, 16, 64, 16, 64, 256):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        go.record()
        _send(wfd, {"k": k})
        _recv(inbox)  # done
        stream.wait_event(fin)
        t1.record()
        t1.synchronize()
        outside = t0.elapsed_time(t1)
        inproc = float(_recv(inbox)["inproc_ms"])
        rows.append({"k": k, "outside_ms": outside, "inproc_ms": inproc, "ratio": outside / inproc if inproc else 0})
    _send(wfd, {"stop": True})
    return rows


def _new_namespace(ipc: bool = False) -> None:
    """Enter a new user+PID (and IPC) namespace; the caller's next fork is its first process."""
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWPID | (CLONE_NEWIPC if ipc else 0)) != 0:
        raise OSError(ctypes.get_errno(), "unshare(user, pid)")
    for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                       ("/proc/self/gid_map", f"{gid} {gid} 1")):
        with open(path, "w") as f:
            f.write(text)


def _forked(role: str, rfd: int, wfd: int) -> int:
    pid = os.fork()
    if pid == 0:
        _close_others({rfd, wfd})
        try:
            (exporter if role == "exporter" else opener)(rfd, wfd)
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
    return pid


def _close_others(keep: set[int]) -> None:
    for fd in map(int, os.environ.get("PROBE_FDS", "").split(",")):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def child(argv: list[str]) -> None:
    """``child ns|plain ROLE R W`` or ``pair R1 W1 R2 W2`` (exporter's fds, then the opener's)."""
    if argv[0] != "pair":
        _close_others({int(argv[2]), int(argv[3])})
    if argv[0] == "pair":
        _new_namespace()
        pids = [_forked("exporter", int(argv[1]), int(argv[2])), _forked("opener", int(argv[3]), int(argv[4]))]
        _close_others(set())
        for pid in pids:
            os.waitpid(pid, 0)
        return
    mode, role, rfd, wfd = argv[0], argv[1], int(argv[2]), int(argv[3])
    if mode in ("ns", "nsipc"):
        _new_namespace(ipc=mode == "nsipc")
        os.waitpid(_forked(role, rfd, wfd), 0)
    else:
        (exporter if role == "exporter" else opener)(rfd, wfd)


def run_case(exporter_mode: str, opener_mode: str) -> dict[str, Any]:
    e2o_r, e2o_w = os.pipe()
    o2e_r, o2e_w = os.pipe()
    fds = (e2o_r, e2o_w, o2e_r, o2e_w)
    me = [sys.executable, os.path.abspath(__file__), "child"]
    os.environ["PROBE_FDS"] = ",".join(map(str, fds))
    errs = open(os.path.join(os.environ.get("OUT", "/tmp"), f"probe-{exporter_mode}-{opener_mode}.err"), "w")
    if exporter_mode == "pair":
        procs = [subprocess.Popen(me + ["pair", str(o2e_r), str(e2o_w), str(e2o_r), str(o2e_w)], pass_fds=fds,
                                  stdout=subprocess.PIPE, stderr=errs, text=True)]
    else:
        procs = [subprocess.Popen(me + [exporter_mode, "exporter", str(o2e_r), str(e2o_w)], pass_fds=fds,
                                  stderr=errs, text=True),
                 subprocess.Popen(me + [opener_mode, "opener", str(e2o_r), str(o2e_w)], pass_fds=fds,
                                  stdout=subprocess.PIPE, stderr=errs, text=True)]
    for fd in fds:
        os.close(fd)
    out = ""
    try:
        out, _ = procs[-1].communicate(timeout=20)
    except subprocess.TimeoutExpired:
        out = '{"error": "timed out"}'
    for p in procs:
        p.kill()
        p.wait()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    found = json.loads(lines[-1]) if lines else {"error": "no output"}
    return {"exporter": exporter_mode, "opener": opener_mode, **found}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2:])
        return 0
    out = sys.argv[1] if len(sys.argv) > 1 else "ipc_probe.json"
    cases = [("ns", "plain"), ("ns", "ns"), ("plain", "plain"), ("nsipc", "plain"), ("pair", "pair")]
    results = []
    for exporter_mode, opener_mode in cases:
        results.append(run_case(exporter_mode, opener_mode))
        print(json.dumps(results[-1]), flush=True)
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
