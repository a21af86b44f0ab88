"""The policy as the Envoy filter runs it: compiled for wasm32-wasip1.

The filter links the same `huntlb-policy` crate, but for another target, with
another compiler back end. Here the crate's own vector suite (policy/tests/
vectors.rs, the JSON vectors the Lua module also passes) is built for
wasm32-wasip1 and run in a WASI runtime (wasmtime), so the shipped target is
held to the vectors too, not only the host build."""

import json
import subprocess

from harness import ROOT


def wasm_test_binary() -> str:
    out = subprocess.run(["cargo", "test", "--no-run", "--release", "--target", "wasm32-wasip1", "-p", "huntlb-policy",
                          "--test", "vectors", "--message-format=json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=True).stdout
    exe = [m["executable"] for m in map(json.loads, out.splitlines())
           if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "vectors"]
    assert exe, "cargo built no wasm test binary"
    return exe[-1]


def test_policy_vectors_pass_on_wasm32_wasip1(tmp_path):
    import wasmtime

    store = wasmtime.Store(wasmtime.Engine())
    wasi = wasmtime.WasiConfig()
    wasi.argv = ["vectors", "--test-threads=1"]
    policy = str(ROOT / "policy")
    wasi.preopen_dir(policy, policy)  # the suite reads policy/vectors/*.json by the path baked in at build
    out = tmp_path / "stdout"
    wasi.stdout_file = str(out)
    wasi.stderr_file = str(tmp_path / "stderr")
    store.set_wasi(wasi)
    linker = wasmtime.Linker(store.engine)
    linker.define_wasi()
    instance = linker.instantiate(store, wasmtime.Module.from_file(store.engine, wasm_test_binary()))
    code = 0
    try:
        instance.exports(store)["_start"](store)
    except wasmtime.ExitTrap as e:
        code = e.code
    text = out.read_text()
    assert code == 0, text + (tmp_path / "stderr").read_text()
    passed = [l for l in text.splitlines() if l.startswith("test ") and l.endswith(" ok")]
    assert "test result: ok" in text and len(passed) >= 4, text
