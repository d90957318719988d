#!/usr/bin/python3
"""cairn-llama: run llama.cpp's own server on a model inside the image and report what it answered.

Run by the llama.cpp image's gates (stdlib only; the image has no Cairn and no NumPy). It starts
``llama-server`` on the loopback interface (the gate's container has no network) with one thread, no
flash attention and a float32 KV cache — the settings the reference tolerance was measured for — then:

1. ``POST /tokenize`` the prompt text (with BOS): llama.cpp's tokenizer on the model's vocab;
2. ``POST /completion`` the prompt *ids*, greedy (``temperature`` 0), ``n_probs`` top log-probabilities of
   the raw distribution at every generated position: what the gate compares with the NumPy reference;
3. ``POST /detokenize`` the expected continuation and ``POST /v1/completions`` (OpenAI-compatible) the
   prompt text, greedy: the answer's text must be that continuation.

Prints one JSON document. Exit 0 when the server answered every request (whether the answers are right is
judged outside, against the reference); 1 when it did not start or a request failed. The server log's lines
that say where the layers went (``using device ROCm0 …``, ``offloaded 3/3 layers to GPU``, ggml's HIP
initialisation) are reported whole, for the GPU gate's offload evidence.

``cairn-llama --backend-check --expect no-device|device`` instead checks ggml's HIP backend itself: every
library ``libggml-hip.so`` needs resolves (``ldd``; each ``not found`` is named), the library loads
(``dlopen``), and ggml's HIP initialisation finds no device (``hipErrorNoDevice``: "no ROCm-capable device
is detected") in a container without ``/dev/kfd`` — or at least one with it. It also reads the build that
``llama-server --version`` names: an sdist build without the vendored pin says ``build 0, commit unknown``. A backend that
cannot load fails here naming the library, where llama.cpp would fall back to the CPU or abort.
"""

import argparse
import ctypes
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

PORT = 18080


def request(path, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as response:
        return json.loads(response.read().decode())


def wait_healthy(server, seconds=180):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return f"llama-server exited with {server.returncode} before it was ready"
        try:
            if request("/health", timeout=5).get("status") == "ok":
                return ""
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(0.5)
    return f"llama-server was not healthy after {seconds} s"


NO_DEVICE = "no ROCm-capable device is detected"  # hipGetErrorString(hipErrorNoDevice)
OFFLOAD_LINES = re.compile(r"offload|using device|ggml_cuda_init|ROCm|failed to initialize")


def hip_library():
    """The libggml-hip.so the engine loads: the one in the installed llama_cpp package's lib/ (its tools link
    the same file). The package is located, not imported: importing it would load the library."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, "lib", "libggml-hip.so")
        if os.path.exists(path):
            return path
    return None


def unresolved(path):
    """Every ``libX.so.N => not found`` ldd reports for ``path`` (its dependencies' too), in ldd's order."""
    try:
        done = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"ldd could not run: {exc}"]
    return [line.split("=>")[0].strip() for line in done.stdout.splitlines() if "not found" in line]


def capture_stderr(call):
    """``call()`` with the process's fd 2 (where ggml logs) captured; returns (result, text)."""
    import tempfile

    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            result = call()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        return result, sink.read().decode(errors="replace")


def server_build(server="llama-server"):
    """(number, commit, line) from ``llama-server --version``: ``version: <v> (build 11312, commit 0c1e57098)``."""
    try:
        done = subprocess.run([server, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, None, f"{server} --version could not run: {exc}"
    text = done.stdout + done.stderr
    match = re.search(r"version: \S+ \(build (\d+), commit ([^)]*)\)", text)
    if not match:
        return None, None, text.strip()[-300:]
    return int(match.group(1)), match.group(2), match.group(0)


def backend_check(expect, server):
    report = {"mode": "backend-check", "expect": expect, "kfd": os.path.exists("/dev/kfd"), "failures": []}
    path = hip_library()
    report["library"] = path
    if path is None:
        report["failures"].append("no llama_cpp/lib/libggml-hip.so in the image: llama.cpp has no HIP backend here")
        return report
    missing = unresolved(path)
    report["not_found"] = missing
    if missing:
        report["failures"].append(f"libggml-hip.so cannot load: {', '.join(missing)} not found "
                                  f"(needed by {path} or a library it loads)")
        return report
    try:
        library, log = capture_stderr(lambda: ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))
    except OSError as exc:
        report["failures"].append(f"libggml-hip.so cannot load: {exc}")
        return report
    count_fn = library.ggml_backend_cuda_get_device_count
    count_fn.restype = ctypes.c_int
    count, init_log = capture_stderr(count_fn)
    report["devices"] = count
    report["init_log"] = (log + init_log).strip()[-2000:]
    if expect == "no-device":
        if count != 0:
            report["failures"].append(f"ggml's HIP backend found {count} device(s) where the container has no GPU")
        elif NO_DEVICE not in init_log:
            report["failures"].append("ggml's HIP backend did not initialise to hipErrorNoDevice "
                                      f"({NO_DEVICE!r}); it logged: {init_log.strip()[-300:]!r}")
    elif count < 1:
        report["failures"].append(f"ggml's HIP backend found no device with /dev/kfd present: {init_log.strip()[-300:]!r}")
    # after the library: a tool whose libggml-hip cannot load fails to start, and the library is the reason
    number, commit, line = server_build(server)
    report["version"] = line
    if number is None:
        report["failures"].append(f"{server} --version names no build: {line!r}")
    elif number == 0 or commit in ("unknown", ""):
        report["failures"].append(f"{server} --version names no real llama.cpp build: {line!r}")
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(prog="cairn-llama")
    parser.add_argument("--backend-check", action="store_true", help="check ggml's HIP backend loads (no model)")
    parser.add_argument("--expect", choices=("no-device", "device"), default="no-device")
    parser.add_argument("--model")
    parser.add_argument("--prompt-ids", help="comma-separated token ids (BOS first)")
    parser.add_argument("--prompt-text")
    parser.add_argument("--continuation", help="comma-separated ids the reference continues with")
    parser.add_argument("--n-probs", type=int, default=8)
    parser.add_argument("--gpu-layers", type=int, default=0, help="-ngl: 0 on CPU, 99 offloads every layer")
    parser.add_argument("--server", default="llama-server")
    args = parser.parse_args(argv)
    if args.backend_check:
        report = backend_check(args.expect, args.server)
        print(json.dumps(report, indent=1, sort_keys=True))
        return 1 if report["failures"] else 0
    if not (args.model and args.prompt_ids and args.prompt_text and args.continuation):
        parser.error("--model, --prompt-ids, --prompt-text and --continuation are required without --backend-check")
    prompt = [int(t) for t in args.prompt_ids.split(",")]
    continuation = [int(t) for t in args.continuation.split(",")]
    report = {"model": args.model, "gpu_layers": args.gpu_layers, "failures": []}
    log_path = "/tmp/llama-server.log"
    command = [args.server, "-m", args.model, "--host", "127.0.0.1", "--port", str(PORT), "-t", "1", "-tb", "1",
               "-c", "128", "-b", "128", "-ub", "128", "-np", "1", "-fa", "off", "-ctk", "f32", "-ctv", "f32",
               "-ngl", str(args.gpu_layers), "--no-warmup", "--seed", "0"]
    report["command"] = command
    with open(log_path, "w") as log:
        try:
            server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        except OSError as exc:
            report["failures"].append(f"cannot start {args.server}: {exc}")
            print(json.dumps(report, indent=1, sort_keys=True))
            return 1
    try:
        problem = wait_healthy(server)
        if problem:
            report["failures"].append(problem)
        else:
            report["tokenize"] = request("/tokenize", {"content": args.prompt_text, "add_special": True})["tokens"]
            done = request("/completion", {"prompt": prompt, "n_predict": len(continuation), "temperature": 0,
                                           "n_probs": args.n_probs, "post_sampling_probs": False,
                                           "cache_prompt": False, "seed": 0})
            report["completion"] = [{"id": step["id"], "logprob": step["logprob"],
                                     "top": [[t["id"], t["logprob"]] for t in step["top_logprobs"]]}
                                    for step in done["completion_probabilities"]]
            report["expected_text"] = request("/detokenize", {"tokens": continuation})["content"]
            answer = request("/v1/completions", {"prompt": args.prompt_text, "max_tokens": len(continuation),
                                                 "temperature": 0, "seed": 0})
            choice = answer["choices"][0]
            report["openai"] = {"object": answer.get("object"), "text": choice.get("text"),
                                "finish_reason": choice.get("finish_reason"), "usage": answer.get("usage")}
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        report["failures"].append(f"llama-server request failed: {exc}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
    with open(log_path, errors="replace") as log:
        text = log.read()
    report["server_log_tail"] = text[-3000:]
    report["offload"] = [line.strip() for line in text.splitlines() if OFFLOAD_LINES.search(line)][:40]
    report["device"] = "gpu" if args.gpu_layers else "cpu"
    report["kfd"] = os.path.exists("/dev/kfd")
    print(json.dumps(report, indent=1, sort_keys=True))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
