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
judged outside, against the reference); 1 when it did not start or a request failed.
"""

import argparse
import json
import os
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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="cairn-llama")
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt-ids", required=True, help="comma-separated token ids (BOS first)")
    parser.add_argument("--prompt-text", required=True)
    parser.add_argument("--continuation", required=True, help="comma-separated ids the reference continues with")
    parser.add_argument("--n-probs", type=int, default=8)
    parser.add_argument("--gpu-layers", type=int, default=0, help="-ngl: 0 on CPU, 99 offloads every layer")
    parser.add_argument("--server", default="llama-server")
    args = parser.parse_args(argv)
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
        tail = log.read()[-3000:]
    report["server_log_tail"] = tail
    report["device"] = "gpu" if args.gpu_layers else "cpu"
    report["kfd"] = os.path.exists("/dev/kfd")
    print(json.dumps(report, indent=1, sort_keys=True))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
