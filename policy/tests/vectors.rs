//! Runs every JSON vector in `policy/vectors/`. The Lua module runs the same files
//! (`haproxy-lua/test/run_vectors.lua`), so the two implementations cannot drift.

use huntlb_policy::{Load, Policy, Try};
use serde_json::Value;
use std::path::PathBuf;

fn vectors(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("vectors").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run_cases(file: &str) -> usize {
    let doc = vectors(file);
    let mut steps_run = 0;
    for case in doc["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().unwrap();
        let policy: Policy = case["policy"].as_str().unwrap().parse().unwrap();
        let workers = case["workers"].as_u64().unwrap() as u32;
        let mut state = policy.initial_state();
        for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            let busy = step["busy"].as_u64().unwrap() as u32;
            let try_ = match step["try"].as_str().unwrap() {
                "offer" => Try::Offer,
                "final" => Try::Final,
                other => panic!("{name}: bad try {other}"),
            };
            let want_accept = step["expect"].as_str().unwrap() == "accept";
            for r in 0..step["repeat"].as_u64().unwrap_or(1) {
                let seen = step.get("seen").and_then(Value::as_u64).map(|v| v as u32);
                let out = policy.decide(state, try_, Load { busy, workers, seen });
                state = out.state;
                assert_eq!(out.decision.is_accept(), want_accept, "{file} `{name}` step {i} repeat {r}");
                if let Some(c) = step.get("c") {
                    assert_eq!(u64::from(state.c), c.as_u64().unwrap(), "{file} `{name}` step {i} repeat {r}: c");
                }
                steps_run += 1;
            }
        }
    }
    steps_run
}

#[test]
fn admission_vectors() {
    use huntlb_policy::{admission, Gates, Verdict};
    use std::sync::atomic::AtomicU64;
    let doc = vectors("admission.json");
    let mut steps_run = 0;
    for case in doc["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().unwrap();
        let policy: Policy = case["policy"].as_str().unwrap().parse().unwrap();
        let workers = case["workers"].as_u64().unwrap() as u32;
        let cell = AtomicU64::new(policy.initial_state().to_bits());
        for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            let g = &step["gates"];
            let gate = |k: &str| g.get(k).and_then(Value::as_bool).unwrap_or(false);
            let gates = Gates { draining: gate("draining"), app_down: gate("app_down"), at_capacity: gate("at_capacity") };
            let try_ = if step["try"] == "offer" { Try::Offer } else { Try::Final };
            let load = Load::new(step["busy"].as_u64().unwrap() as u32, workers);
            for r in 0..step["repeat"].as_u64().unwrap_or(1) {
                let got = match admission::admit(&policy, &cell, try_, gates, load) {
                    Verdict::Accept => "accept".to_string(),
                    Verdict::Overloaded => "overloaded".to_string(),
                    Verdict::Refuse(why) => format!("refuse:{}", why.name()),
                };
                assert_eq!(got, step["expect"].as_str().unwrap(), "admission `{name}` step {i} repeat {r}");
                let state = huntlb_policy::State::from_bits(cell.load(std::sync::atomic::Ordering::Acquire));
                if let Some(c) = step.get("c") {
                    assert_eq!(u64::from(state.c), c.as_u64().unwrap(), "admission `{name}` step {i} repeat {r}: c");
                }
                if let Some(b) = step.get("is_busy") {
                    assert_eq!(policy.is_busy(state, load), b.as_bool().unwrap(), "admission `{name}` step {i} repeat {r}: is_busy");
                }
                steps_run += 1;
            }
        }
    }
    assert!(steps_run > 15);
}

#[test]
fn static_vectors() {
    assert!(run_cases("static.json") > 10);
}

#[test]
fn dynamic_vectors() {
    assert!(run_cases("dynamic.json") > 500);
}

#[test]
fn spec_vectors() {
    let doc = vectors("specs.json");
    for v in doc["valid"].as_array().unwrap() {
        let spec = v["spec"].as_str().unwrap();
        let p: Policy = spec.parse().unwrap_or_else(|e| panic!("`{spec}` should parse: {e}"));
        match (v["kind"].as_str().unwrap(), p) {
            ("always", Policy::Always) => {}
            ("static", Policy::Static { c }) => assert_eq!(u64::from(c), v["c"].as_u64().unwrap()),
            ("dynamic", Policy::Dynamic(d)) => {
                assert_eq!(u64::from(d.window), v["window"].as_u64().unwrap(), "{spec}");
                assert_eq!(d.low, v["low"].as_f64().unwrap(), "{spec}");
                assert_eq!(d.high, v["high"].as_f64().unwrap(), "{spec}");
                assert_eq!(u64::from(d.c0), v["c0"].as_u64().unwrap(), "{spec}");
                assert_eq!(d.c_max.map(u64::from), v.get("c_max").and_then(Value::as_u64), "{spec}");
                assert_eq!(u64::from(d.c_min), v.get("c_min").and_then(Value::as_u64).unwrap_or(0), "{spec}");
                assert_eq!(d.seen_margin.map(u64::from), v.get("seen_margin").and_then(Value::as_u64), "{spec}");
            }
            (kind, p) => panic!("`{spec}`: expected {kind}, got {p:?}"),
        }
        // an old key name parses, and the host is given the line to log about it
        assert_eq!(huntlb_policy::spec_warning(spec).as_deref(), v.get("warning").and_then(Value::as_str), "{spec}");
    }
    for v in doc["invalid"].as_array().unwrap() {
        let spec = v["spec"].as_str().unwrap();
        let e = spec.parse::<Policy>().expect_err(spec);
        assert_eq!(e.key, v["key"].as_str().unwrap(), "`{spec}`: {e}");
    }
}

fn as_field(n: usize, v: &[u8]) -> huntlb_policy::protocol::Field<'_> {
    use huntlb_policy::protocol::Field;
    match n {
        0 => Field::Absent,
        1 => Field::One(v),
        _ => Field::Repeated,
    }
}

#[test]
fn classify_vectors() {
    use huntlb_policy::protocol::{classify, per_try_mark, Mark};
    let doc = vectors("classify.json");
    let field = |v: &Value| -> (usize, Vec<u8>) {
        let a = v.as_array().unwrap();
        (a.len(), a.first().map(|s| s.as_str().unwrap().as_bytes().to_vec()).unwrap_or_default())
    };
    for case in doc["cases"].as_array().unwrap() {
        let (no, ov) = field(&case["offer"]);
        let (nt, tv) = field(&case["target"]);
        let (na, av) = case.get("attempt").map_or((0, vec![]), field);
        let got = match classify(as_field(no, &ov), per_try_mark(as_field(nt, &tv), as_field(na, &av))) {
            Mark::Offer => "offer",
            Mark::Final => "final",
            Mark::Plain => "plain",
            Mark::Malformed => "malformed",
        };
        assert_eq!(got, case["class"].as_str().unwrap(), "{case}");
    }
}

#[test]
fn settings_vectors() {
    use huntlb_policy::settings::{parse_workers, RawSettings};
    let doc = vectors("settings.json");
    let default_id = doc["default_id"].as_str().unwrap();
    // text args as the Lua sidecar gets them, read the way the Rust hosts read theirs
    let validate = |args: &Value| {
        let workers = match args.get("workers").and_then(Value::as_str) {
            Some(w) => Some(parse_workers(w)?),
            None => None,
        };
        RawSettings { policy: args.get("policy").and_then(Value::as_str), workers, id: args.get("id").and_then(Value::as_str) }
            .validate(default_id)
    };
    for v in doc["valid"].as_array().unwrap() {
        let s = validate(&v["args"]).unwrap_or_else(|e| panic!("{v}: {e}"));
        let kind = match s.policy {
            Policy::Always => "always",
            Policy::Static { .. } => "static",
            Policy::Dynamic(_) => "dynamic",
        };
        assert_eq!(kind, v["kind"], "{v}");
        if let Some(c) = v.get("c") {
            assert_eq!(Some(s.policy.initial_state().c as u64), c.as_u64(), "{v}");
        }
        let seen_margin = match s.policy {
            Policy::Dynamic(d) => d.seen_margin.map(u64::from),
            _ => None,
        };
        assert_eq!(seen_margin, v.get("seen_margin").and_then(Value::as_u64), "{v}");
        let warning = v["args"].get("policy").and_then(Value::as_str).and_then(huntlb_policy::spec_warning);
        assert_eq!(warning.as_deref(), v.get("warning").and_then(Value::as_str), "{v}");
        assert_eq!(u64::from(s.workers), v["workers"].as_u64().unwrap(), "{v}");
        assert_eq!(s.id, v["id"].as_str().unwrap(), "{v}");
    }
    for v in doc["invalid"].as_array().unwrap() {
        let e = validate(&v["args"]).expect_err(&v.to_string());
        assert_eq!(e.key, v["key"].as_str().unwrap(), "{v}: {e}");
    }
}

#[test]
fn metrics_vector_is_the_table() {
    use huntlb_policy::metrics::ALL;
    let doc = vectors("metrics.json");
    let listed = doc["metrics"].as_array().unwrap();
    assert_eq!(listed.len(), ALL.len(), "metrics.json and metrics::ALL list different counts");
    for (m, v) in ALL.iter().zip(listed) {
        assert_eq!(v["name"], m.name);
        assert_eq!(v["kind"], m.kind.name(), "{}", m.name);
        assert_eq!(v["sidecar"], m.sidecar, "{}", m.name);
        // the help is the generated reference's text (docs/metrics.md, scripts/metrics_doc.py)
        assert_eq!(v["help"], m.help, "{}", m.name);
        let label = m.label.map(|(k, vals)| (k.to_string(), vals.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
        let listed_label = v.get("label").map(|k| {
            (k.as_str().unwrap().to_string(), v["values"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect())
        });
        assert_eq!(label, listed_label, "{}", m.name);
    }
}

#[test]
fn offer_vectors() {
    use huntlb_policy::protocol::{held_refusal, offerable, Body};
    let doc = vectors("offer.json");
    let body = |v: &Value| match v {
        Value::String(s) if s == "empty" => Body::Empty,
        Value::String(s) if s == "unknown" => Body::Unknown,
        Value::String(s) if s == "held" => Body::Held,
        v => Body::Length(v.as_u64().unwrap_or_else(|| panic!("body {v}"))),
    };
    for case in doc["rule"].as_array().unwrap() {
        let got = offerable(body(&case["body"]), case["limit"].as_u64().unwrap()).map_or_else(|why| why.name(), |()| "offer");
        assert_eq!(got, case["expect"].as_str().unwrap(), "{case}");
    }
    for case in doc["held"].as_array().unwrap() {
        let flag = |k: &str| case[k].as_bool().unwrap_or_else(|| panic!("{k} in {case}"));
        let got = held_refusal(case["read"].as_u64().unwrap(), flag("ended"), flag("waited_out"), case["limit"].as_u64().unwrap());
        assert_eq!(got.name(), case["expect"].as_str().unwrap(), "{case}");
    }
    let mut n = 0;
    for (proxy, front) in doc["fronts"].as_object().unwrap() {
        let limit = front["limit"].as_u64().unwrap();
        for r in front["requests"].as_array().unwrap() {
            assert_eq!(offerable(body(&r["sees"]), limit).is_ok(), r["offered"].as_bool().unwrap(), "{proxy}: {r}");
            n += 1;
        }
    }
    assert!(n >= 10);
}

/// The header values of a case (`"values"`: [] absent, one, or repeated), as
/// the agent hands them to the protocol's parsers.
fn header_values(c: &Value) -> Vec<&str> {
    c["values"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect()
}

fn field<'a>(vals: &[&'a str]) -> huntlb_policy::protocol::Field<'a> {
    use huntlb_policy::protocol::Field;
    match vals {
        [] => Field::Absent,
        [one] => Field::One(one.as_bytes()),
        _ => Field::Repeated,
    }
}

#[test]
fn seen_vectors() {
    use huntlb_policy::protocol::parse_seen;
    let doc = vectors("seen.json");
    let cases = doc["cases"].as_array().unwrap();
    for c in cases {
        let vals = header_values(c);
        let want = c["seen"].as_u64().map(|v| v as u32);
        assert_eq!(parse_seen(field(&vals)), want, "seen.json {vals:?}");
    }
    assert!(cases.len() >= 10);
}

#[test]
fn front_vectors() {
    use huntlb_policy::protocol::parse_front;
    let doc = vectors("front.json");
    let cases = doc["cases"].as_array().unwrap();
    for c in cases {
        let vals = header_values(c);
        let want = c["front"].as_str().map(str::as_bytes);
        assert_eq!(parse_front(field(&vals)), want, "front.json {vals:?}");
    }
    assert!(cases.len() >= 10);
}

#[test]
fn forward_vectors() {
    use huntlb_policy::forward::{open, route, seal, Forwarding, Rejected, Report, Route, Sub};
    let doc = vectors("forward.json");
    let opt = |v: &Value| v.as_u64().map(|n| n as u32);
    let cases = doc["route"].as_array().unwrap();
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let f = Forwarding { peer_margin: c["peer_margin"].as_u64().unwrap() as u32, seen_margin: opt(&c["seen_margin"]) };
        let peers: Vec<u32> = c["peers"].as_array().unwrap().iter().map(|p| p.as_u64().unwrap() as u32).collect();
        let got = route(f, c["busy"].as_u64().unwrap() as u32, opt(&c["seen"]), &peers, c["draw"].as_u64().unwrap());
        let want = match c["expect"].as_u64() {
            Some(i) => Route::Forward(i as usize),
            None => Route::Keep,
        };
        assert_eq!(got, want, "forward.json `{name}`");
    }
    let reports = doc["reports"].as_array().unwrap();
    for c in reports {
        let d = c["text"].as_str().unwrap();
        match (Report::parse(d.as_bytes()), c.get("error")) {
            (Ok(r), None) => {
                let nonce = |k: &str| u64::from_str_radix(c[k].as_str().unwrap(), 16).unwrap();
                let want = Report {
                    from: c["from"].as_str().unwrap().into(),
                    to: c["to"].as_str().unwrap().into(),
                    boot: nonce("boot"),
                    seq: c["seq"].as_u64().unwrap(),
                    busy: c["busy"].as_u64().unwrap() as u32,
                    ready: c["ready"].as_bool().unwrap(),
                    sub: match c["sub"].as_str().unwrap() {
                        "beats" => Sub::Beats,
                        "changes" => Sub::Changes,
                        "leave" => Sub::Leave,
                        other => panic!("forward.json: sub `{other}`"),
                    },
                    mine: nonce("mine"),
                    yours: nonce("yours"),
                };
                assert_eq!(r, want, "{d}");
                assert_eq!(r.to_string(), d, "a report prints as it parses");
            }
            (Err(e), Some(want)) => assert!(e.starts_with(want.as_str().unwrap()), "`{d}`: error `{e}`, want it to start `{want}`"),
            (got, want) => panic!("`{d}`: got {got:?}, want error {want:?}"),
        }
    }
    // The MAC is the host's (the agent checks these tags with HMAC-SHA256);
    // here the framing: the tag the datagram carries is the one `open` hands
    // the verifier, over exactly the text, and `seal` writes it back alike.
    for c in doc["sealed"].as_array().unwrap() {
        let (text, d) = (c["text"].as_str().unwrap(), c["datagram"].as_str().unwrap());
        let mut seen = None;
        let r = open(d.as_bytes(), |t, tag| {
            seen = Some((t.to_vec(), *tag));
            true
        })
        .unwrap_or_else(|e| panic!("`{d}`: {e:?}"));
        let (t, tag) = seen.unwrap();
        assert_eq!(t, text.as_bytes());
        assert_eq!(seal(text, &tag), d);
        assert_eq!(r.to_string(), text);
        assert_eq!(open(d.as_bytes(), |_, _| false), Err(Rejected::Unauthenticated));
    }
    // An older agent's authentic report is told apart from junk, by version.
    for c in doc["older"].as_array().unwrap() {
        let d = c["datagram"].as_str().unwrap();
        assert_eq!(open(d.as_bytes(), |_, _| true), Err(Rejected::Version(c["version"].as_str().unwrap().into())), "`{d}`");
        assert_eq!(open(d.as_bytes(), |_, _| false), Err(Rejected::Unauthenticated), "`{d}`: the tag comes first");
    }
    for c in doc["unsealed"].as_array().unwrap() {
        let d = c["datagram"].as_str().unwrap();
        match open(d.as_bytes(), |_, _| true) {
            Err(Rejected::Malformed(e)) => assert!(e.starts_with(c["error"].as_str().unwrap()), "`{d}`: {e}"),
            other => panic!("`{d}`: {other:?}"),
        }
    }
    assert!(cases.len() >= 10 && reports.len() >= 10);
}

#[test]
fn sample_vectors() {
    use huntlb_policy::forward::redraw;
    let doc = vectors("sample.json");
    let cases = doc["redraw"].as_array().unwrap();
    let n = |c: &Value, k: &str| c[k].as_u64().unwrap_or_else(|| panic!("sample.json: `{k}` in {c}"));
    fn names(v: &Value) -> Vec<&str> {
        v.as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect()
    }
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let kept_from: Vec<(&str, u32)> = c["kept_from"].as_array().unwrap().iter().map(|e| (e[0].as_str().unwrap(), e[1].as_u64().unwrap() as u32)).collect();
        let draws: Vec<u64> = c["draws"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
        let mut left = draws.iter();
        let got = redraw(&kept_from, &names(&c["others"]), n(c, "sample") as usize, n(c, "keep") as usize, || *left.next().unwrap_or_else(|| panic!("sample.json `{name}`: more draws asked than listed")));
        assert_eq!(got, names(&c["expect"]), "sample.json `{name}`");
        assert_eq!(left.len(), 0, "sample.json `{name}`: draws listed but not used");
    }
    assert!(cases.len() >= 10);
}

#[test]
fn llm_vectors() {
    use huntlb_policy::llm::LlmWeights;
    let doc = vectors("llm.json");
    let n = |c: &Value, k: &str| c[k].as_u64().unwrap_or_else(|| panic!("llm.json: `{k}` in {c}"));
    for c in doc["prompt_tokens"].as_array().unwrap() {
        let w = LlmWeights { bytes_per_token: n(c, "bytes_per_token") as u32, tokens_per_seat: n(c, "tokens_per_seat") as u32, workers: n(c, "workers") as u32 };
        assert_eq!(w.prompt_tokens(c["content_length"].as_u64()), n(c, "tokens"), "llm.json `{}`", c["name"]);
    }
    for c in doc["load"].as_array().unwrap() {
        let w = LlmWeights { bytes_per_token: 4, tokens_per_seat: n(c, "tokens_per_seat") as u32, workers: 1 };
        assert_eq!(u64::from(w.load(n(c, "inflight") as u32, n(c, "pending_tokens"))), n(c, "load"), "llm.json `{}`", c["name"]);
    }
    use huntlb_policy::llm::{kv_fixed, KvBound};
    let kv_fixed_cases = doc["kv_fixed"].as_array().unwrap();
    for c in kv_fixed_cases {
        // a number, or the text of a Prometheus sample's value (NaN, +Inf)
        let v = c["value"].as_f64().unwrap_or_else(|| c["value"].as_str().unwrap().parse().unwrap());
        assert_eq!(kv_fixed(v).map(u64::from), c["fixed"].as_u64(), "llm.json `{}`", c["name"]);
    }
    let kv_load_cases = doc["kv_load"].as_array().unwrap();
    for c in kv_load_cases {
        let k = KvBound { busy_at: n(c, "busy_at") as u32, stale_ms: n(c, "stale_ms") };
        let read = c["read"].as_array().map(|r| (r[0].as_u64().unwrap() as u32, r[1].as_u64().unwrap()));
        assert_eq!(u64::from(k.load(n(c, "b") as u32, n(c, "workers") as u32, read)), n(c, "load"), "llm.json `{}`", c["name"]);
    }
    assert!(kv_fixed_cases.len() >= 8 && kv_load_cases.len() >= 6);
    let seen_cases = doc["seen_while_free"].as_array().unwrap();
    for c in seen_cases {
        let got = huntlb_policy::llm::seen_while_free(n(c, "busy") as u32, n(c, "workers") as u32, c["seen"].as_u64().map(|s| s as u32));
        assert_eq!(got.map(u64::from), c["kept"].as_u64(), "llm.json `{}`", c["name"]);
    }
    assert!(seen_cases.len() >= 6);
}

#[test]
fn prefix_vectors() {
    use huntlb_policy::prefix::{home, member_id, prefix_hash, rank, weight, Affinity};
    let doc = vectors("prefix.json");
    let hex = |v: &Value| u64::from_str_radix(v.as_str().unwrap(), 16).unwrap();
    let text = |v: &Value| v.as_str().unwrap().as_bytes().to_vec();
    let size = |v: &Value| v.as_u64().unwrap() as usize;
    for c in doc["prefix_hash"].as_array().unwrap() {
        assert_eq!(prefix_hash(&text(&c["prompt"]), size(&c["bytes"])), hex(&c["hash"]), "prefix.json `{}`", c["name"]);
    }
    for c in doc["member_id"].as_array().unwrap() {
        assert_eq!(member_id(c["addr"].as_str().unwrap()), hex(&c["id"]), "prefix.json {c}");
    }
    let ids = |members: &Value| members.as_array().unwrap().iter().map(|m| member_id(m.as_str().unwrap())).collect::<Vec<u64>>();
    let r = &doc["rank"];
    let rids = ids(&r["members"]);
    for c in r["cases"].as_array().unwrap() {
        let h = prefix_hash(&text(&c["prompt"]), size(&c["bytes"]));
        assert_eq!(h, hex(&c["hash"]), "prefix.json {c}");
        assert_eq!(weight(h, rids[0]), hex(&c["weight_of_first"]), "prefix.json {c}");
        assert_eq!(rank(h, &rids), Some(size(&c["home"])), "prefix.json {c}");
    }
    let d = &doc["home"];
    let hids = ids(&d["members"]);
    let h = prefix_hash(&text(&d["prompt"]), size(&d["bytes"]));
    for c in d["cases"].as_array().unwrap() {
        let counts: Vec<Option<u32>> = c["counts"].as_array().unwrap().iter().map(|v| v.as_u64().map(|n| n as u32)).collect();
        let a = Affinity { bytes: size(&d["bytes"]), bound: c["bound"].as_u64().unwrap() as u32, seats: c.get("seats").map_or(0, |v| v.as_u64().unwrap() as u32) };
        let got = home(h, a, &hids, c["least"].as_u64().unwrap() as u32, |i| counts[i]);
        assert_eq!(got, c["expect"].as_u64().map(|n| n as usize), "prefix.json `{}`", c["name"]);
    }
}
