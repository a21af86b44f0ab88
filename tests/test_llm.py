"""The emulated model server (`huntlb-llm`) on its own and behind a real agent:
streams arrive token by token (through the agent too, before the server has
finished), a client that leaves mid-stream frees its seat at the server, a
full queue answers 503, and vLLM's metric names count what happened."""

import http.client
import json

import pytest
from benchlib.llmfleet import llm_metrics
from harness import binary, request, wait_http, wait_until


metrics = llm_metrics  # tests/test_llm_gateway.py imports it by this name


@pytest.fixture
def llm(procs, addrs):
    """Start one emulated server; `llm(**flags)` -> its address."""
    def start(**flags):
        host = addrs.host()
        addr = f"{host}:8000"
        argv = [binary("huntlb-llm"), "--listen", addr]
        for k, v in flags.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        p = procs.start(f"llm-{host}", argv)
        wait_http(addr, "/health", proc=p)
        return addr
    return start


def stream(addr: str, body: dict, path: str = "/v1/completions") -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    c.request("POST", path, body=json.dumps({**body, "stream": True}), headers={"content-type": "application/json"})
    return c, c.getresponse()


def events(resp: http.client.HTTPResponse, n: int | None = None) -> list[str]:
    """The next n SSE data lines (all, to the end, if n is None)."""
    out = []
    while n is None or len(out) < n:
        line = resp.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            out.append(line[6:].strip().decode())
            if out[-1] == "[DONE]":
                break
    return out


def test_a_stream_is_one_event_a_token_then_done(llm):
    addr = llm(time_scale=0.05)
    c, r = stream(addr, {"prompt": "x" * 400, "max_tokens": 5})
    assert r.status == 200 and r.getheader("content-type") == "text/event-stream"
    evs = events(r)
    c.close()
    assert evs[-1] == "[DONE]" and len(evs) == 6
    chunks = [json.loads(e) for e in evs[:-1]]
    assert [ch["choices"][0]["finish_reason"] for ch in chunks] == [None] * 4 + ["length"]
    m = metrics(addr)
    assert m["vllm:generation_tokens_total"] == 5 and m["vllm:prompt_tokens_total"] == 100
    assert m["vllm:request_success_total"] == 1 and m["vllm:num_requests_running"] == 0


def test_chat_and_whole_answers_and_bad_bodies(llm):
    addr = llm(time_scale=0.05)
    status, _, body = request(addr, "POST", "/v1/chat/completions",
                              body=json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}).encode())
    v = json.loads(body)
    assert status == 200 and v["object"] == "chat.completion" and v["usage"]["completion_tokens"] == 3
    for bad, why in [(b"{", "not JSON"), (b'{"prompt": 5}', "`prompt`"), (b'{"prompt": "a", "max_tokens": 0}', "`max_tokens`"),
                     (b'{"messages": [{"role": "user"}]}', "`content`")]:
        path = "/v1/chat/completions" if b"messages" in bad else "/v1/completions"
        status, _, body = request(addr, "POST", path, body=bad)
        assert status == 400 and why in json.loads(body)["error"]["message"], body


def test_a_shared_prefix_is_counted_as_cache_hits(llm):
    addr = llm(time_scale=0.05)
    system = "You are a terse assistant. " * 40  # 1080 bytes: 16 full blocks
    for q in ("first?", "second?"):
        status, _, _ = request(addr, "POST", "/v1/completions", body=json.dumps({"prompt": system + q, "max_tokens": 1}).encode())
        assert status == 200
    m = metrics(addr)
    assert m["vllm:prefix_cache_hits_total"] == 16 * 16


def test_a_full_queue_answers_503(llm):
    addr = llm(time_scale=0.05, max_num_seqs=1, max_num_queued_reqs=1)
    c1, r1 = stream(addr, {"prompt": "a", "max_tokens": 100000})
    assert events(r1, 1)  # running
    c2, r2 = stream(addr, {"prompt": "b", "max_tokens": 1})  # queued behind it
    wait_until(lambda: metrics(addr)["vllm:num_requests_waiting"] == 1, what="the second request queued")
    status, _, body = request(addr, "POST", "/v1/completions", body=b'{"prompt": "c"}')
    assert status == 503 and "max-num-queued-reqs" in json.loads(body)["error"]["message"]
    assert metrics(addr)["huntlb_llm_refused_total"] == 1
    c1.close()  # the first leaves: the queued one runs and ends
    assert events(r2)[-1] == "[DONE]"
    c2.close()


@pytest.mark.parametrize("through_agent", [False, True])
def test_a_client_that_leaves_frees_its_seat(llm, procs, addrs, through_agent):
    addr = llm(time_scale=0.05, max_num_seqs=1)
    if through_agent:
        host = addrs.host()
        _, addr_in, _ = procs.agent(host, addr, policy="always")
    else:
        addr_in = addr
    c, r = stream(addr_in, {"prompt": "a", "max_tokens": 100000})
    assert len(events(r, 3)) == 3
    # tokens arrive while the server still runs the request: relayed one by one
    assert metrics(addr)["vllm:num_requests_running"] == 1
    c.close()
    wait_until(lambda: metrics(addr)["vllm:num_requests_running"] == 0, what="the seat freed")
    assert metrics(addr)["huntlb_llm_aborted_total"] == 1
    # and the next request gets it
    c, r = stream(addr_in, {"prompt": "b", "max_tokens": 2})
    assert events(r)[-1] == "[DONE]"
    c.close()
