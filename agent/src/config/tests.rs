use super::*;

fn raw(f: impl FnOnce(&mut Raw)) -> Result<Config, ConfigError> {
    let mut r = Raw::default();
    f(&mut r);
    r.validate()
}

/// A test's fleet key file, `tag` in its name, written 0600 (the agent refuses
/// one others may read): its path, for the test to remove.
fn key_file(tag: &str) -> std::path::PathBuf {
    let key = std::env::temp_dir().join(format!("huntlb-config-{tag}-{}.key", std::process::id()));
    std::fs::write(&key, "9f3c5a7e01b2d4c6aa81f0e3b5c7d9e1f2a4b6c8d0e1f3a5b7c9d1e3f5a7b9c1").unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    key
}

/// What every tier needs: listening, one peer, the key at `key`.
fn tier_at(key: &std::path::Path) -> impl Fn(&mut Raw) + Copy + '_ {
    move |r: &mut Raw| {
        r.fleet_listen = Some("127.0.0.1:9700".into());
        r.fleet_peers = Some("127.0.0.2:9700".into());
        r.fleet_key_file = Some(key.to_string_lossy().into_owned());
    }
}

fn key_of(r: Result<Config, ConfigError>) -> String {
    match r {
        Err(e) if e.key().is_some() => e.key().unwrap().to_string(),
        other => panic!("expected an invalid key, got {other:?}"),
    }
}

#[test]
fn defaults_are_valid() {
    let c = raw(|_| {}).unwrap();
    assert_eq!(c.workers, 32);
    assert_eq!(c.load, LoadSource::Inflight);
    assert_eq!(c.policy.to_string(), "dynamic:window=50,low=0.4,high=0.6,c0=1,seen_margin=1");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn only_a_named_agent_says_who_served() {
    // nobody named it: its id is for its logs, clients learn nothing of the fleet
    let c = raw(|_| {}).unwrap();
    assert_eq!((c.id.as_str(), c.served_by), ("agent", None));
    let c = raw(|r| r.id = Some("web-3".into())).unwrap();
    assert_eq!(c.served_by.as_ref().map(|v| v.as_bytes()), Some(&b"web-3"[..]));
}

#[test]
fn bad_values_name_their_key() {
    assert_eq!(key_of(raw(|r| r.policy = Some("fastest".into()))), "policy");
    assert_eq!(key_of(raw(|r| r.listen = Some("nowhere".into()))), "listen");
    assert_eq!(key_of(raw(|r| r.workers = Some(0))), "workers");
    assert_eq!(key_of(raw(|r| r.load = Some("cpu".into()))), "load");
    assert_eq!(key_of(raw(|r| r.load = Some("apache".into()))), "apache_scoreboard");
    assert_eq!(key_of(raw(|r| r.id = Some("two words".into()))), "id");
    assert_eq!(key_of(raw(|r| r.health_path = Some("health".into()))), "health_path");
    assert_eq!(key_of(raw(|r| r.app_timeout_ms = Some(0))), "app_timeout_ms");
    assert_eq!(key_of(raw(|r| r.idle_timeout_ms = Some(10))), "idle_timeout_ms");
    assert_eq!(key_of(raw(|r| r.max_headers = Some(4))), "max_headers");
}

#[test]
fn llm_keys_only_with_load_llm_and_in_range() {
    use huntlb_policy::llm::LlmWeights;
    let c = raw(|r| {
        r.load = Some("llm".into());
        r.workers = Some(4);
    })
    .unwrap();
    assert_eq!(c.load, LoadSource::Llm(LlmWeights { bytes_per_token: 4, tokens_per_seat: 512, workers: 4 }));
    let c = raw(|r| {
        r.load = Some("llm".into());
        r.llm_bytes_per_token = Some(3);
        r.llm_prefill_tokens_per_seat = Some(2048);
    })
    .unwrap();
    assert_eq!(c.load, LoadSource::Llm(LlmWeights { bytes_per_token: 3, tokens_per_seat: 2048, workers: 32 }));
    // meaningless without load = llm: named, not ignored
    for load in [None, Some("inflight"), Some("apache")] {
        let set = |r: &mut Raw| {
            r.load = load.map(Into::into);
            r.apache_status_url = Some("http://127.0.0.1/server-status?auto".into());
        };
        assert_eq!(key_of(raw(|r| { set(r); r.llm_bytes_per_token = Some(4) })), "llm_bytes_per_token");
        assert_eq!(key_of(raw(|r| { set(r); r.llm_prefill_tokens_per_seat = Some(512) })), "llm_prefill_tokens_per_seat");
    }
    let llm = |r: &mut Raw| r.load = Some("llm".into());
    assert_eq!(key_of(raw(|r| { llm(r); r.llm_bytes_per_token = Some(0) })), "llm_bytes_per_token");
    assert_eq!(key_of(raw(|r| { llm(r); r.llm_bytes_per_token = Some(65) })), "llm_bytes_per_token");
    assert_eq!(key_of(raw(|r| { llm(r); r.llm_prefill_tokens_per_seat = Some(0) })), "llm_prefill_tokens_per_seat");
    assert_eq!(key_of(raw(|r| { llm(r); r.llm_prefill_tokens_per_seat = Some(1_000_001) })), "llm_prefill_tokens_per_seat");
    assert_eq!(key_of(raw(|r| { llm(r); r.apache_scoreboard = Some("/run/apache2/scoreboard".into()) })), "apache_scoreboard");
}

#[test]
fn fleet_keys_are_checked_and_named() {
    assert!(raw(|_| {}).unwrap().fleet.is_none());
    assert_eq!(key_of(raw(|r| r.fleet_peers = Some("127.0.0.2:9700".into()))), "fleet_peers");
    assert_eq!(key_of(raw(|r| r.forward_peer_margin = Some(1))), "forward_peer_margin");
    let key = key_file("test");
    let key = key.to_string_lossy().into_owned();
    let fleet = |peers: &str| {
        let (peers, key) = (peers.to_string(), key.clone());
        move |r: &mut Raw| {
            r.fleet_listen = Some("127.0.0.1:9700".into());
            r.fleet_peers = Some(peers);
            r.fleet_key_file = Some(key);
        }
    };
    let c = raw(fleet("127.0.0.1:9700, 127.0.0.2:9700,")).unwrap().fleet.unwrap();
    assert_eq!(c.peers.len(), 2);
    assert_eq!(c.advertise, "127.0.0.1:8080");
    assert_eq!((c.from, c.peer_port), ("127.0.0.1:9700".parse().unwrap(), 8080), "reports come from fleet_listen; forwards go to listen's port");
    // Reports are sealed: no key, no tier.
    assert_eq!(key_of(raw(|r| {
        fleet("127.0.0.2:9700")(r);
        r.fleet_key_file = None;
    })), "fleet_key_file");
    assert_eq!(key_of(raw(|r| {
        fleet("127.0.0.2:9700")(r);
        r.fleet_key_file = Some("/nonexistent/fleet.key".into());
    })), "fleet_key_file");
    assert_eq!(key_of(raw(|r| r.fleet_key_file = Some(key.clone()))), "fleet_key_file", "only meaningful with fleet_listen");
    // Bound to every address: the sender it names is fleet_advertise's IP.
    let any = raw(|r| {
        fleet("127.0.0.2:9700")(r);
        r.fleet_listen = Some("0.0.0.0:9700".into());
        r.fleet_advertise = Some("10.1.2.3:8080".into());
    })
    .unwrap()
    .fleet
    .unwrap();
    assert_eq!(any.from, "10.1.2.3:9700".parse().unwrap());
    assert_eq!(key_of(raw(|r| {
        fleet("127.0.0.2:9700")(r);
        r.fleet_listen = Some("0.0.0.0:9700".into());
        r.fleet_advertise = Some("backend-1:8080".into());
    })), "fleet_advertise");
    assert_eq!(c.forwarding, huntlb_policy::forward::Forwarding { peer_margin: 0, seen_margin: Some(1) });
    assert_eq!(key_of(raw(fleet("127.0.0.1:9700"))), "fleet_peers");
    assert_eq!(key_of(raw(fleet("nowhere"))), "fleet_peers");
    assert_eq!(key_of(raw(fleet("backends:0"))), "fleet_peers");
    assert_eq!(key_of(raw(fleet("bad_name:9700"))), "fleet_peers");
    assert_eq!(key_of(raw(fleet("127.0.0.300:9700"))), "fleet_peers");
    let c = raw(fleet("backends:9700,[::1]:9700")).unwrap().fleet.unwrap();
    assert_eq!(c.peers, [Peer::Name { host: "backends".into(), port: 9700 }, Peer::Addr("[::1]:9700".parse().unwrap())]);
    assert_eq!(key_of(raw(|r| {
        fleet("127.0.0.2:9700")(r);
        r.fleet_dead_after_ms = Some(10);
        r.fleet_heartbeat_ms = Some(10);
    })), "fleet_dead_after_ms");
    for bad in ["a,b", "a/b:8080", "host", "0.0.0.0:8080"] {
        assert_eq!(key_of(raw(|r| {
            fleet("127.0.0.2:9700")(r);
            r.fleet_advertise = Some(bad.into());
        })), "fleet_advertise", "{bad}");
    }
    assert_eq!(key_of(raw(|r| {
        fleet("127.0.0.2:9700")(r);
        r.listen = Some("0.0.0.0:8080".into());
    })), "fleet_advertise");
    assert_eq!(key_of(raw(|r| {
        fleet("127.0.0.2:9700")(r);
        r.fleet_settle_ms = Some(1000);
    })), "fleet_settle_ms");
    assert_eq!(key_of(raw(|r| {
        fleet("127.0.0.2:9700")(r);
        r.fleet_resolve_ms = Some(500);
    })), "fleet_resolve_ms");
    assert_eq!(key_of(raw(|r| {
        fleet("127.0.0.2:9700")(r);
        r.fleet_listen = Some("udp".into());
    })), "fleet_listen");
    // The sample: defaults, and the keys named when they do not fit.
    let c = raw(fleet("127.0.0.2:9700")).unwrap().fleet.unwrap();
    assert_eq!((c.sample, c.keep, c.resample), (8, 4, Duration::from_millis(100)));
    let c = raw(|r| {
        fleet("127.0.0.2:9700")(r);
        r.fleet_sample = Some(1);
    })
    .unwrap()
    .fleet
    .unwrap();
    assert_eq!((c.sample, c.keep), (1, 0), "a default keep below a small sample");
    for (key, set) in [
        ("fleet_resample_ms", &(|r: &mut Raw| r.fleet_resample_ms = Some(200)) as &dyn Fn(&mut Raw)),
        ("fleet_sample_keep", &|r: &mut Raw| r.fleet_sample_keep = Some(8)),
        ("fleet_sample_keep", &|r: &mut Raw| {
            r.fleet_sample = Some(0);
            r.fleet_sample_keep = Some(1);
        }),
        ("fleet_sample", &|r: &mut Raw| r.fleet_sample = Some(5000)),
    ] {
        assert_eq!(key_of(raw(|r| {
            fleet("127.0.0.2:9700")(r);
            set(r);
        })), key);
    }
    assert_eq!(key_of(raw(|r| r.fleet_sample = Some(4))), "fleet_sample", "only with fleet_listen");
}

/// The quiet beat: 125 ms (half the default dead_after, as before it was a key) unless set; unset, never faster than the heartbeat
/// (a fleet that beats each 2 s beats no faster when quiet); set below the
/// heartbeat, refused naming it; and a member asked for beats only is alive
/// for it and half a dead_after.
#[test]
fn the_quiet_beat_is_never_below_the_heartbeat() {
    let key = key_file("quiet-beat");
    let tier = tier_at(&key);
    let fleet = |f: &dyn Fn(&mut Raw)| {
        raw(|r| {
            tier(r);
            f(r);
        })
    };
    let c = fleet(&|_| {}).unwrap().fleet.unwrap();
    assert_eq!((c.quiet_beat, c.beats_alive()), (Duration::from_millis(1000), Duration::from_millis(1125)));
    let slow = |r: &mut Raw| {
        r.fleet_heartbeat_ms = Some(2000);
        r.fleet_dead_after_ms = Some(5000);
        r.fleet_resample_ms = Some(2000);
    };
    let c = fleet(&slow).unwrap().fleet.unwrap();
    assert_eq!((c.quiet_beat, c.beats_alive()), (Duration::from_millis(2000), Duration::from_millis(5000)));
    assert_eq!(key_of(fleet(&|r| {
        slow(r);
        r.fleet_quiet_beat_ms = Some(1000);
    })), "fleet_quiet_beat_ms");
    let c = fleet(&|r| r.fleet_quiet_beat_ms = Some(125)).unwrap().fleet.unwrap();
    assert_eq!(c.beats_alive(), Duration::from_millis(250), "the earlier cadence: alive for dead_after, as before the key");
    std::fs::remove_file(&key).unwrap();
}

#[test]
fn fleet_pass_plain_is_off_by_default_and_only_with_the_tier() {
    let key = key_file("pass-plain");
    let tier = tier_at(&key);
    assert!(!raw(tier).unwrap().fleet.unwrap().pass_plain, "off unless asked");
    for on in [true, false] {
        let c = raw(|r| {
            tier(r);
            r.fleet_pass_plain = Some(on);
        });
        assert_eq!(c.unwrap().fleet.unwrap().pass_plain, on);
        // Without the tier there is nothing to pass a try on to: named, either value.
        assert_eq!(key_of(raw(|r| r.fleet_pass_plain = Some(on))), "fleet_pass_plain");
    }
    // A TOML file's key, by its one name; a wrong type is the file's error, naming it.
    let parsed: Raw = toml::from_str("fleet_pass_plain = true").unwrap();
    assert_eq!(parsed.fleet_pass_plain, Some(true));
    let e = toml::from_str::<Raw>("fleet_pass_plain = \"yes\"").unwrap_err().to_string();
    assert!(e.contains("fleet_pass_plain") || e.contains("bool"), "{e}");
    std::fs::remove_file(&key).unwrap();
}

/// The tier's defaults are written once, in the policy crate (the simulator
/// takes them from there too); the table quotes them, and a tier given no
/// knob runs with every default the table declares for it.
#[test]
fn the_tier_runs_with_the_declared_defaults_the_policy_crates_among_them() {
    use huntlb_policy::forward::{default_sample_keep, Forwarding, DEFAULT_RESAMPLE_MS, DEFAULT_SAMPLE, DEFAULT_SAMPLE_KEEP};
    let f = Forwarding::default();
    let seen = f.seen_margin.expect("the tier consults the front's count by default");
    let table = key_table();
    let shown = |key: &str| table.iter().find(|k| k.name == key).unwrap_or_else(|| panic!("{key} is declared")).shown();
    assert_eq!(shown("fleet_sample"), DEFAULT_SAMPLE.to_string());
    assert_eq!(shown("fleet_sample_keep"), format!("half the sample, at most {DEFAULT_SAMPLE_KEEP}"));
    assert_eq!(shown("fleet_resample_ms"), DEFAULT_RESAMPLE_MS.to_string());
    assert_eq!(shown("forward_peer_margin"), f.peer_margin.to_string());
    assert_eq!(shown("forward_seen_margin"), seen.to_string());

    let key = key_file("defaults");
    let c = raw(|r| {
        r.fleet_listen = Some("127.0.0.1:9700".into());
        r.fleet_peers = Some("127.0.0.2:9700".into());
        r.fleet_key_file = Some(key.to_string_lossy().into_owned());
    })
    .unwrap()
    .fleet
    .unwrap();
    std::fs::remove_file(&key).unwrap();
    let resample = Duration::from_millis(DEFAULT_RESAMPLE_MS);
    assert_eq!((c.sample, c.keep, c.resample, c.forwarding), (DEFAULT_SAMPLE, default_sample_keep(DEFAULT_SAMPLE), resample, f));
    let ms = |key: &str| Duration::from_millis(shown(key).parse().unwrap());
    let runs = [
        ("fleet_heartbeat_ms", c.heartbeat),
        ("fleet_dead_after_ms", c.dead_after),
        ("fleet_quiet_beat_ms", c.quiet_beat),
        ("fleet_commit_ms", c.commit),
        ("fleet_settle_ms", c.settle),
        ("fleet_resolve_ms", c.resolve),
        ("fleet_resample_ms", c.resample),
    ];
    for (key, runs_with) in runs {
        assert_eq!(runs_with, ms(key), "{key}");
    }
    assert_eq!((shown("fleet_pass_plain"), shown("fleet_key_readable_by_others")), (c.pass_plain.to_string(), "false".to_string()));
    assert_eq!(c.key_readers, crate::seal::Readers::Owner);
}

/// Every key is declared once, in the table: `--help` and docs/agent.md's
/// row say its default, its range and what it needs as the table does.
#[test]
fn help_and_docs_say_what_the_table_declares() {
    let cmd = <Raw as clap::CommandFactory>::command();
    let docs = documented_keys();
    for key in key_table() {
        let k = key.name;
        let arg = cmd.get_arguments().find(|a| a.get_id() == k).unwrap_or_else(|| panic!("no flag for {k}"));
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        let (default, meaning) = docs.get(k).unwrap_or_else(|| panic!("docs/agent.md has no row for `{k}`"));
        let shown = key.shown();
        assert_eq!(default.replace('`', ""), shown, "docs/agent.md's default of `{k}`");
        match shown.as_str() {
            "" => assert!(!help.contains("[default"), "--help of {k}: {help}"),
            "required" => assert!(help.ends_with("[required]"), "--help of {k}: {help}"),
            _ => assert!(help.ends_with(&format!("[default: {shown}]")), "--help of {k}: {help}"),
        }
        if let Some(range) = key.range {
            assert_eq!(documented_range(meaning), Some(range), "docs/agent.md's range of `{k}`: {meaning}");
        }
        // the row's opening "with ...:" names every key or setting it needs
        let with = meaning.split(':').next().unwrap_or("").replace('`', "");
        for need in key.needs {
            assert!(meaning.starts_with("with ") && with.contains(need), "docs/agent.md's `{k}` row does not open with {need}: {meaning}");
        }
    }
}

/// Every condition a key needs (`needs` in the table) is one `validate`
/// checks with `only_with`: a misspelt one would never refuse its key.
#[test]
fn every_condition_a_key_needs_is_checked() {
    let conds: std::collections::BTreeSet<&str> = key_table().iter().flat_map(|k| k.needs.iter().copied()).collect();
    let checked = [LLM, APACHE, "llm_metrics_url", "fleet_listen", "tls_cert", "llm_prefix_bytes above 0"];
    assert_eq!(conds, checked.into_iter().collect());
}

/// `--print-defaults`: every key with a value when not given, as the agent
/// runs with it (what the harness and the benches read, not a copy).
#[test]
fn the_printed_defaults_are_what_the_agent_runs_with() {
    let printed: serde_json::Value = serde_json::from_str(&defaults_json()).unwrap();
    let c = raw(|_| {}).unwrap();
    assert_eq!(printed["workers"], c.workers);
    assert_eq!(printed["threads"], c.threads);
    assert_eq!(printed["id"], c.id.as_str());
    assert_eq!(printed["listen"], c.listen.to_string());
    assert_eq!(printed["app_timeout_ms"], c.app_timeout.as_millis() as u64);
    assert_eq!(printed["health_path"], c.health_path.as_str());
    assert!(printed.get("fleet_peer_port").is_none(), "a default worked out from other keys has no value to print");
    let kv = raw(|r| {
        r.load = Some("llm".into());
        r.llm_metrics_url = Some("http://127.0.0.1:9000/metrics".into());
    })
    .unwrap()
    .llm_kv
    .unwrap();
    assert_eq!(huntlb_policy::llm::kv_fixed(printed["llm_kv_busy_at"].as_f64().unwrap()), Some(kv.bound.busy_at));
    assert_eq!(printed["llm_kv_busy_at"], 0.95);
}

#[test]
fn tls_keys_come_together_and_bad_files_are_named() {
    assert!(raw(|_| {}).unwrap().tls.is_none());
    assert_eq!(key_of(raw(|r| r.tls_cert = Some("c.pem".into()))), "tls_key");
    assert_eq!(key_of(raw(|r| r.tls_key = Some("k.pem".into()))), "tls_cert");
    assert_eq!(key_of(raw(|r| r.tls_client_ca = Some("ca.pem".into()))), "tls_client_ca");
    let dir = std::env::temp_dir().join(format!("huntlb-agent-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.pem");
    std::fs::write(&junk, "not a pem file\n").unwrap();
    let junk = junk.display().to_string();
    let missing = dir.join("missing.pem").display().to_string();
    let both = |c: &str, k: &str| {
        let (c, k) = (c.to_string(), k.to_string());
        move |r: &mut Raw| {
            r.tls_cert = Some(c);
            r.tls_key = Some(k);
        }
    };
    assert_eq!(key_of(raw(both(&missing, &junk))), "tls_cert");
    assert_eq!(key_of(raw(both(&junk, &junk))), "tls_cert");
    let e = raw(both(&missing, &junk)).unwrap_err().to_string();
    assert!(e.contains("missing.pem"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn policy_error_carries_inner_key() {
    let e = raw(|r| r.policy = Some("dynamic:window=0".into())).unwrap_err().to_string();
    assert!(e.contains("`policy`") && e.contains("`window`"), "{e}");
}

#[test]
fn unknown_file_key_is_named() {
    let e = toml::from_str::<Raw>("polcy = \"static:4\"").unwrap_err();
    assert!(e.message().contains("polcy"), "{}", e.message());
}

/// The old names of renamed keys are taken, each with a warning naming the new
/// key; old and new together are refused, naming the new key; a flag's new
/// name overrides a file's old one.
#[test]
fn renamed_keys_are_taken_with_a_warning() {
    let key = key_file("renamed");
    let key = key.to_string_lossy().into_owned();
    let fleet = |r: &mut Raw| {
        r.fleet_listen = Some("127.0.0.1:9700".into());
        r.fleet_peers = Some("127.0.0.2:9700".into());
        r.fleet_key_file = Some(key.clone());
    };
    let c = raw(|r| {
        fleet(r);
        r.forward_slack = Some(2);
        r.forward_seen_slack = Some(3);
    })
    .unwrap();
    assert_eq!(c.fleet.unwrap().forwarding, huntlb_policy::forward::Forwarding { peer_margin: 2, seen_margin: Some(3) });
    assert_eq!(
        c.warnings,
        [
            "config key `forward_slack` is deprecated: write `forward_peer_margin` (same meaning)",
            "config key `forward_seen_slack` is deprecated: write `forward_seen_margin` (same meaning)",
        ]
    );
    assert_eq!(key_of(raw(|r| {
        fleet(r);
        r.forward_slack = Some(1);
        r.forward_peer_margin = Some(1);
    })), "forward_peer_margin");
    assert_eq!(key_of(raw(|r| {
        fleet(r);
        r.forward_seen_slack = Some(1);
        r.forward_seen_margin = Some(2);
    })), "forward_seen_margin");
    // an old name is still only meaningful with the tier, named by its new name
    assert_eq!(key_of(raw(|r| r.forward_slack = Some(1))), "forward_peer_margin");

    // the policy's old key: the same policy, and a warning
    let c = raw(|r| r.policy = Some("dynamic:slack=1".into())).unwrap();
    assert_eq!(c.policy, huntlb_policy::settings::DEFAULT_POLICY.parse().unwrap());
    assert_eq!(c.warnings, ["config key `policy`: policy key `slack` is deprecated: write `seen_margin` (same meaning)"]);

    // from a file and from flags: each source is read alone first
    let file = std::env::temp_dir().join(format!("huntlb-config-renamed-{}.toml", std::process::id()));
    std::fs::write(&file, "forward_slack = 5\nforward_seen_slack = 4\n").unwrap();
    let flags = |f: &dyn Fn(&mut Raw)| {
        let mut r = Raw { config: Some(file.clone()), ..Raw::default() };
        fleet(&mut r);
        f(&mut r);
        Raw::load(r)
    };
    let c = flags(&|r| r.forward_peer_margin = Some(1)).unwrap();
    assert_eq!(c.fleet.unwrap().forwarding, huntlb_policy::forward::Forwarding { peer_margin: 1, seen_margin: Some(4) }, "the flag wins");
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    std::fs::write(&file, "forward_slack = 5\nforward_peer_margin = 4\n").unwrap();
    assert_eq!(key_of(flags(&|_| {})), "forward_peer_margin", "both in one file");
    std::fs::write(&file, "").unwrap();
    let file_arg = file.to_string_lossy().into_owned();
    let argv = ["huntlb-agent", "--config", &file_arg, "--forward-seen-slack", "0", "--fleet-listen", "127.0.0.1:9700", "--fleet-peers", "127.0.0.2:9700", "--fleet-key-file", &key];
    let c = Raw::load(<Raw as clap::Parser>::try_parse_from(argv).unwrap()).unwrap();
    assert_eq!(c.fleet.unwrap().forwarding.seen_margin, Some(0), "the old flag is taken");
    assert_eq!(c.warnings, ["config key `forward_seen_slack` is deprecated: write `forward_seen_margin` (same meaning)"]);
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn prefix_affinity_is_off_by_default_and_only_with_load_llm_and_the_tier() {
    use huntlb_policy::prefix::{Affinity, DEFAULT_BOUND};
    let key = key_file("prefix");
    let key_path = key.to_string_lossy().into_owned();
    let tier = |r: &mut Raw| {
        r.load = Some("llm".into());
        r.workers = Some(4);
        r.fleet_listen = Some("127.0.0.1:9700".into());
        r.fleet_peers = Some("127.0.0.2:9700".into());
        r.fleet_key_file = Some(key_path.clone());
    };
    let affinity = |f: &dyn Fn(&mut Raw)| raw(|r| f(r)).unwrap().fleet.unwrap().affinity;
    assert_eq!(affinity(&tier), None, "off unless asked");
    assert_eq!(affinity(&|r| { tier(r); r.llm_prefix_bytes = Some(0) }), None, "0 is off");
    assert_eq!(affinity(&|r| { tier(r); r.llm_prefix_bytes = Some(256) }), Some(Affinity { bytes: 256, bound: DEFAULT_BOUND, seats: 4 }), "the seats: the agent's workers");
    assert_eq!(affinity(&|r| { tier(r); r.llm_prefix_bytes = Some(256); r.llm_prefix_bound = Some(0) }), Some(Affinity { bytes: 256, bound: 0, seats: 4 }));
    // named, not ignored: out of range, a bound without a prefix, no tier, no load = llm
    assert_eq!(key_of(raw(|r| { tier(r); r.llm_prefix_bytes = Some(65_537) })), "llm_prefix_bytes");
    assert_eq!(key_of(raw(|r| { tier(r); r.llm_prefix_bytes = Some(256); r.llm_prefix_bound = Some(1_000_001) })), "llm_prefix_bound");
    assert_eq!(key_of(raw(|r| { tier(r); r.llm_prefix_bound = Some(1) })), "llm_prefix_bound");
    assert_eq!(key_of(raw(|r| { r.load = Some("llm".into()); r.llm_prefix_bytes = Some(256) })), "llm_prefix_bytes");
    assert_eq!(key_of(raw(|r| { r.load = Some("llm".into()); r.llm_prefix_bound = Some(2) })), "llm_prefix_bound");
    assert_eq!(key_of(raw(|r| { tier(r); r.load = None; r.llm_prefix_bytes = Some(256) })), "llm_prefix_bytes");
    let parsed: Raw = toml::from_str("llm_prefix_bytes = 512\nllm_prefix_bound = 1").unwrap();
    assert_eq!((parsed.llm_prefix_bytes, parsed.llm_prefix_bound), (Some(512), Some(1)));
}

#[test]
fn llm_seen_while_free_is_on_with_load_llm_and_named_without_it_or_the_tier() {
    let key = std::env::temp_dir().join(format!("huntlb-config-test-seen-{}.key", std::process::id()));
    std::fs::write(&key, "9f3c5a7e01b2d4c6aa81f0e3b5c7d9e1f2a4b6c8d0e1f3a5b7c9d1e3f5a7b9c1").unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let key_path = key.to_string_lossy().into_owned();
    let tier = |r: &mut Raw| {
        r.load = Some("llm".into());
        r.fleet_listen = Some("127.0.0.1:9700".into());
        r.fleet_peers = Some("127.0.0.2:9700".into());
        r.fleet_key_file = Some(key_path.clone());
    };
    assert!(raw(tier).unwrap().llm_seen_while_free, "on by default with load = llm");
    assert!(!raw(|r| { tier(r); r.llm_seen_while_free = Some(false) }).unwrap().llm_seen_while_free);
    // a request count has no seats to be free: off with any other load
    assert!(!raw(|r| { tier(r); r.load = None }).unwrap().llm_seen_while_free);
    assert_eq!(key_of(raw(|r| { tier(r); r.load = None; r.llm_seen_while_free = Some(false) })), "llm_seen_while_free");
    assert_eq!(key_of(raw(|r| { r.load = Some("llm".into()); r.llm_seen_while_free = Some(true) })), "llm_seen_while_free");
    let parsed: Raw = toml::from_str("llm_seen_while_free = false").unwrap();
    assert_eq!(parsed.llm_seen_while_free, Some(false));
    std::fs::remove_file(&key).unwrap();
}

#[test]
fn kv_keys_only_with_load_llm_and_a_url_on_the_apps_host() {
    use huntlb_policy::llm::KvBound;
    let llm = |r: &mut Raw| {
        r.load = Some("llm".into());
        r.app = Some("127.0.0.5:8000".into());
    };
    let c = raw(|r| llm(r)).unwrap();
    assert_eq!(c.llm_kv, None); // no url: off, the counts alone
    let c = raw(|r| {
        llm(r);
        r.llm_metrics_url = Some("http://127.0.0.5:8000/metrics".into());
    })
    .unwrap();
    let kv = c.llm_kv.unwrap();
    assert_eq!((kv.poll, kv.bound), (Duration::from_millis(250), KvBound { busy_at: 9500, stale_ms: 1750 }));
    let c = raw(|r| {
        llm(r);
        r.llm_metrics_url = Some("http://127.0.0.5:9090/metrics".into());
        r.llm_metrics_poll_ms = Some(50);
        r.llm_kv_busy_at = Some(0.8);
    })
    .unwrap();
    assert_eq!(c.llm_kv.unwrap().bound, KvBound { busy_at: 8000, stale_ms: 1150 });
    // meaningless without load = llm, or (poll, bound) without the url
    assert_eq!(key_of(raw(|r| r.llm_metrics_url = Some("http://127.0.0.1:8000/metrics".into()))), "llm_metrics_url");
    assert_eq!(key_of(raw(|r| { r.load = Some("inflight".into()); r.llm_kv_busy_at = Some(0.9) })), "llm_kv_busy_at");
    assert_eq!(key_of(raw(|r| { llm(r); r.llm_metrics_poll_ms = Some(100) })), "llm_metrics_poll_ms");
    assert_eq!(key_of(raw(|r| { llm(r); r.llm_kv_busy_at = Some(0.9) })), "llm_kv_busy_at");
    let url = |u: &str| {
        let u = u.to_string();
        move |r: &mut Raw| {
            llm(r);
            r.llm_metrics_url = Some(u.clone());
        }
    };
    // not the app's host: another IP, a name, another scheme, no URL at all
    for bad in ["http://127.0.0.6:8000/metrics", "http://localhost:8000/metrics", "https://127.0.0.5:8000/metrics", "127.0.0.5:8000", "http://[::1]:8000/metrics", "not a url"] {
        let set = url(bad);
        assert_eq!(key_of(raw(|r| set(r))), "llm_metrics_url", "{bad}");
    }
    for bad in [0.0, -0.5, 1.01, f64::NAN, 0.00001] {
        let set = url("http://127.0.0.5:8000/metrics");
        assert_eq!(key_of(raw(|r| { set(r); r.llm_kv_busy_at = Some(bad) })), "llm_kv_busy_at", "{bad}");
    }
    for bad in [0, 9] {
        let set = url("http://127.0.0.5:8000/metrics");
        assert_eq!(key_of(raw(|r| { set(r); r.llm_metrics_poll_ms = Some(bad) })), "llm_metrics_poll_ms", "{bad}");
    }
    // an IPv6 app: its metrics on the same IP
    let c = raw(|r| {
        r.load = Some("llm".into());
        r.app = Some("[::1]:8000".into());
        r.llm_metrics_url = Some("http://[::1]:8000/metrics".into());
    })
    .unwrap();
    assert!(c.llm_kv.is_some());
}

#[test]
fn apache_status_url_is_the_apps_own_page() {
    // The same rule as llm_metrics_url's: the page sets this server's load,
    // so only the app's own IP may serve it (an attacker's host named here
    // would decide where the front's offers are accepted).
    let apache = |u: &str| {
        let u = u.to_string();
        move |r: &mut Raw| {
            r.load = Some("apache".into());
            r.app = Some("127.0.0.7:8080".into());
            r.apache_status_url = Some(u.clone());
        }
    };
    let set = apache("http://127.0.0.7:8080/server-status?auto");
    assert!(matches!(raw(|r| set(r)).unwrap().load, LoadSource::Apache { .. }));
    // mod_status on another port of the same host is the app's too
    let set = apache("http://127.0.0.7:81/server-status?auto");
    assert!(raw(|r| set(r)).is_ok());
    for bad in ["http://127.0.0.8:8080/server-status?auto", "http://localhost:8080/server-status?auto", "https://127.0.0.7/server-status?auto", "not a url"] {
        let set = apache(bad);
        assert_eq!(key_of(raw(|r| set(r))), "apache_status_url", "{bad}");
    }
}

/// `threads`: one by default (a current-thread runtime), up to 64; 0 and more refused naming the key.
#[test]
fn threads_default_to_one_and_out_of_range_names_the_key() {
    assert_eq!(raw(|_| {}).unwrap().threads, 1);
    assert_eq!(raw(|r| r.threads = Some(4)).unwrap().threads, 4);
    assert_eq!(key_of(raw(|r| r.threads = Some(0))), "threads");
    assert_eq!(key_of(raw(|r| r.threads = Some(65))), "threads");
}

/// Every error from the config file names the file, the line and column, and
/// the key: a wrong type, a syntax error, an unknown key, a value out of range,
/// a key under its old name. A key given as a flag is the flag's error; a key
/// the file lacks but needs names the file.
#[test]
fn file_errors_name_the_file_line_column_and_key() {
    let dir = std::env::temp_dir().join(format!("huntlb-config-places-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("agent.toml");
    let path = file.display().to_string();
    let load = |text: &str, flags: &[&str]| {
        std::fs::write(&file, text).unwrap();
        let argv = ["huntlb-agent", "--config", path.as_str()].into_iter().chain(flags.iter().copied());
        Raw::load(<Raw as clap::Parser>::try_parse_from(argv).unwrap()).unwrap_err().to_string()
    };
    let cases = [
        // the type error serde gives alone: `invalid type: string "32", expected u32`
        ("policy = \"static:4\"\n\nworkers = \"32\"\n", ":3:11: config key `workers`: invalid type: string \"32\", expected u32"),
        ("id = \"caf\u{e9}\"\nfleet_pass_plain = \"yes\"\n", ":2:20: config key `fleet_pass_plain`: invalid type: string \"yes\", expected a boolean"),
        ("workers = 32\nlisten = \n", ":2:10: config key `listen`: "),
        ("workers = 32\npolicy \"static:4\"\n", ":2:8: config key `policy`: "),
        ("# the app\n polcy = \"static:4\"\n", ":2:2: config key `polcy`: unknown key `polcy` (every key: `huntlb-agent --help`, docs/agent.md)"),
        ("workers = 0\n", ":1:1: config key `workers`: "),
        ("app = \"127.0.0.1:9000\"\n  max_headers = 4\n", ":2:3: config key `max_headers`: 4 is out of range (16 to 10000)"),
        ("forward_slack = 1\n", ":1:1: config key `forward_peer_margin`: only meaningful with fleet_listen (written as `forward_slack`)"),
        ("forward_slack = 1\nforward_peer_margin = 2\n", ":2:1: config key `forward_peer_margin`: given twice"),
    ];
    for (text, want) in cases {
        let e = load(text, &[]);
        assert!(e.starts_with(&format!("{path}{want}")), "{text:?}:\n got  {e}\n want {path}{want}");
    }
    // A flag's error is the flag's: no place in a file that does not hold it.
    assert_eq!(load("workers = 4\n", &["--workers", "0"]), "config key `workers`: 0 is out of range (1 to 65535)");
    // Required by a key the file has, absent from it: the file and the key.
    let e = load("fleet_listen = \"127.0.0.1:9700\"\nfleet_peers = \"127.0.0.2:9700\"\n", &[]);
    assert!(e.starts_with(&format!("config file {path}: config key `fleet_key_file`: required with fleet_listen")), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// docs/agent.md's table, by key: (default, meaning).
fn documented_keys() -> std::collections::BTreeMap<String, (String, String)> {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/agent.md")).unwrap();
    let start = docs.find("| key | default | meaning |").expect("docs/agent.md's key table");
    docs[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_start_matches('|').splitn(3, '|').map(str::trim).collect();
            let key = cells[0].trim_matches('`');
            (key.to_string(), (cells[1].to_string(), cells[2].trim_end_matches('|').trim_end().to_string()))
        })
        .collect()
}

/// The documented keys are the agent's, one for one (every flag but
/// `--config` and the old names, which the table names in the new key's row).
#[test]
fn the_documented_keys_are_the_agents() {
    let cmd = <Raw as clap::CommandFactory>::command();
    let flags: std::collections::BTreeSet<String> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !["config", "print_defaults", "help", "version"].contains(&a.get_id().as_str()))
        .map(|a| a.get_id().to_string())
        .collect();
    let documented: std::collections::BTreeSet<String> = documented_keys().into_keys().collect();
    assert_eq!(documented, flags);
    let declared: std::collections::BTreeSet<String> = key_table().into_iter().map(|k| k.name.to_string()).collect();
    assert_eq!(declared, flags);
}

/// A key's range, as its row in docs/agent.md writes it: `(LO to HI` or
/// `(at least LO`, the first in the row's meaning.
fn documented_range(meaning: &str) -> Option<(u64, Option<u64>)> {
    let num = |s: &str| s.chars().take_while(char::is_ascii_digit).collect::<String>().parse::<u64>().ok();
    meaning.match_indices('(').find_map(|(i, _)| {
        let rest = &meaning[i + 1..];
        if let Some(r) = rest.strip_prefix("at least ") {
            return Some((num(r)?, None));
        }
        let lo = num(rest)?;
        let hi = rest[lo.to_string().len()..].strip_prefix(" to ")?;
        Some((lo, Some(num(hi)?)))
    })
}

/// Every range the code enforces is in docs/agent.md's table, as the code
/// has it: each key's documented bounds are taken and the values just past
/// them refused naming the key; its documented default is what the agent
/// runs with when the key is not given; and each rule between keys (a peer's
/// death after its heartbeat, a tier key without `fleet_listen`) is written in
/// the key's row and refused naming the key.
#[test]
fn the_documented_ranges_are_the_codes() {
    let key = key_file("ranges");
    let key_path = key.to_string_lossy().into_owned();
    let tier = move |r: &mut Raw| {
        r.fleet_listen = Some("127.0.0.1:9700".into());
        r.fleet_peers = Some("127.0.0.2:9700,backends:9700".into());
        r.fleet_key_file = Some(key_path.clone());
    };
    let none = |_: &mut Raw| {};
    let apache = |r: &mut Raw| {
        r.load = Some("apache".into());
        r.apache_scoreboard = Some("/run/apache2/scoreboard".into());
    };
    let llm = |r: &mut Raw| r.load = Some("llm".into());
    let kv = |r: &mut Raw| {
        r.load = Some("llm".into());
        r.llm_metrics_url = Some("http://127.0.0.1:9000/metrics".into());
    };
    type Set = fn(&mut Raw, u64);
    type Get = fn(&Config) -> u64;
    type Ranged<'a> = (&'a str, &'a dyn Fn(&mut Raw), Set, Get);
    // (key, what it needs besides, set it, read what the agent runs with)
    let ranged: Vec<Ranged> = vec![
        ("workers", &none, |r, v| r.workers = Some(v as u32), |c| c.workers.into()),
        ("max_connections", &none, |r, v| r.max_connections = Some(v as usize), |c| c.max_connections as u64),
        ("max_inflight", &none, |r, v| r.max_inflight = Some(v as u32), |c| c.max_inflight.into()),
        ("max_header_bytes", &none, |r, v| r.max_header_bytes = Some(v as usize), |c| c.max_header_bytes as u64),
        ("max_headers", &none, |r, v| r.max_headers = Some(v as usize), |c| c.max_headers as u64),
        ("drain_limit", &none, |r, v| r.drain_limit = Some(v as usize), |c| c.drain_limit as u64),
        ("app_timeout_ms", &none, |r, v| r.app_timeout_ms = Some(v), |c| c.app_timeout.as_millis() as u64),
        ("app_stall_ms", &none, |r, v| r.app_stall_ms = Some(v), |c| c.app_stall.as_millis() as u64),
        ("app_probe_ms", &none, |r, v| r.app_probe_ms = Some(v), |c| c.app_probe.as_millis() as u64),
        ("idle_timeout_ms", &none, |r, v| r.idle_timeout_ms = Some(v), |c| c.idle_timeout.as_millis() as u64),
        ("pool_idle_ms", &none, |r, v| r.pool_idle_ms = Some(v), |c| c.pool_idle.as_millis() as u64),
        ("drain_grace_ms", &none, |r, v| r.drain_grace_ms = Some(v), |c| c.drain_grace.as_millis() as u64),
        ("drain_timeout_ms", &none, |r, v| r.drain_timeout_ms = Some(v), |c| c.drain_timeout.as_millis() as u64),
        ("apache_poll_ms", &apache, |r, v| r.apache_poll_ms = Some(v), |c| match &c.load {
            LoadSource::Scoreboard { poll, .. } => poll.as_millis() as u64,
            other => panic!("{other:?}"),
        }),
        ("llm_bytes_per_token", &llm, |r, v| r.llm_bytes_per_token = Some(v as u32), |c| match &c.load {
            LoadSource::Llm(w) => w.bytes_per_token.into(),
            other => panic!("{other:?}"),
        }),
        ("llm_prefill_tokens_per_seat", &llm, |r, v| r.llm_prefill_tokens_per_seat = Some(v as u32), |c| match &c.load {
            LoadSource::Llm(w) => w.tokens_per_seat.into(),
            other => panic!("{other:?}"),
        }),
        ("llm_metrics_poll_ms", &kv, |r, v| r.llm_metrics_poll_ms = Some(v), |c| c.llm_kv.as_ref().unwrap().poll.as_millis() as u64),
        ("fleet_peer_port", &tier, |r, v| r.fleet_peer_port = Some(v as u16), |c| c.fleet.as_ref().unwrap().peer_port.into()),
        ("fleet_resolve_ms", &tier, |r, v| r.fleet_resolve_ms = Some(v), |c| c.fleet.as_ref().unwrap().resolve.as_millis() as u64),
        ("fleet_sample", &tier, |r, v| {
            r.fleet_sample = Some(v as u32);
            r.fleet_sample_keep = (v > 0).then_some(0);
        }, |c| c.fleet.as_ref().unwrap().sample as u64),
    ];
    let docs = documented_keys();
    for (k, base, set, get) in &ranged {
        let (default, meaning) = docs.get(*k).unwrap_or_else(|| panic!("docs/agent.md has no row for `{k}`"));
        let (lo, hi) = documented_range(meaning).unwrap_or_else(|| panic!("docs/agent.md's `{k}` row states no range: {meaning}"));
        let with = |v: u64| raw(|r| {
            base(r);
            set(r, v);
        });
        for v in [Some(lo), hi].into_iter().flatten() {
            let c = with(v).unwrap_or_else(|e| panic!("`{k}` = {v}, documented in range, refused: {e}"));
            assert_eq!(get(&c), v, "`{k}`");
        }
        if lo > 0 {
            assert_eq!(key_of(with(lo - 1)), *k, "`{k}` = {} is below the documented range", lo - 1);
        }
        if let Some(hi) = hi {
            assert_eq!(key_of(with(hi + 1)), *k, "`{k}` = {} is above the documented range", hi + 1);
        }
        // a default that is a number is the agent's (others, such as `listen`'s port, are words)
        if let Ok(d) = default.parse::<u64>() {
            assert_eq!(d, get(&raw(|r| base(r)).unwrap()), "`{k}`: documented default");
        }
    }

    // Rules between keys: written in the key's row, and refused naming the key.
    type Rule<'a> = (&'a str, &'a str, &'a dyn Fn(&mut Raw));
    let rules: Vec<Rule> = vec![
        ("fleet_dead_after_ms", "longer than `fleet_heartbeat_ms`", &|r| {
            r.fleet_heartbeat_ms = Some(100);
            r.fleet_dead_after_ms = Some(100);
        }),
        ("fleet_quiet_beat_ms", "at least `fleet_heartbeat_ms`", &|r| r.fleet_quiet_beat_ms = Some(49)),
        ("fleet_commit_ms", "below `fleet_dead_after_ms`", &|r| r.fleet_commit_ms = Some(250)),
        ("fleet_settle_ms", "at most `fleet_dead_after_ms`", &|r| r.fleet_settle_ms = Some(251)),
        ("fleet_resample_ms", "at most half of `fleet_dead_after_ms`", &|r| r.fleet_resample_ms = Some(126)),
        ("fleet_sample_keep", "below `fleet_sample`", &|r| r.fleet_sample_keep = Some(8)),
    ];
    for (k, phrase, break_it) in &rules {
        let (_, meaning) = &docs[*k];
        assert!(meaning.to_lowercase().contains(phrase), "docs/agent.md's `{k}` row does not say \"{phrase}\": {meaning}");
        assert_eq!(key_of(raw(|r| {
            tier(r);
            break_it(r);
        })), *k);
    }
    // Every tier key needs `fleet_listen`: said in its row, named when alone.
    type Alone<'a> = (&'a str, &'a dyn Fn(&mut Raw));
    let alone: Vec<Alone> = vec![
        ("fleet_peers", &|r| r.fleet_peers = Some("127.0.0.2:9700".into())),
        ("fleet_advertise", &|r| r.fleet_advertise = Some("127.0.0.1:8080".into())),
        ("fleet_key_file", &|r| r.fleet_key_file = Some("/etc/huntlb/fleet.key".into())),
        ("fleet_key_readable_by_others", &|r| r.fleet_key_readable_by_others = Some(true)),
        ("fleet_peer_port", &|r| r.fleet_peer_port = Some(8080)),
        ("fleet_tls_ca", &|r| r.fleet_tls_ca = Some("ca.pem".into())),
        ("fleet_tls_name", &|r| r.fleet_tls_name = Some("agent".into())),
        ("forward_peer_margin", &|r| r.forward_peer_margin = Some(0)),
        ("forward_seen_margin", &|r| r.forward_seen_margin = Some(1)),
        ("fleet_heartbeat_ms", &|r| r.fleet_heartbeat_ms = Some(50)),
        ("fleet_dead_after_ms", &|r| r.fleet_dead_after_ms = Some(250)),
        ("fleet_quiet_beat_ms", &|r| r.fleet_quiet_beat_ms = Some(1000)),
        ("fleet_commit_ms", &|r| r.fleet_commit_ms = Some(10)),
        ("fleet_settle_ms", &|r| r.fleet_settle_ms = Some(2)),
        ("fleet_resolve_ms", &|r| r.fleet_resolve_ms = Some(1000)),
        ("fleet_sample", &|r| r.fleet_sample = Some(8)),
        ("fleet_resample_ms", &|r| r.fleet_resample_ms = Some(100)),
        ("fleet_sample_keep", &|r| r.fleet_sample_keep = Some(4)),
        ("fleet_pass_plain", &|r| r.fleet_pass_plain = Some(false)),
        ("llm_prefix_bytes", &|r| {
            r.load = Some("llm".into());
            r.llm_prefix_bytes = Some(256);
        }),
    ];
    let tier_keys: std::collections::BTreeSet<&str> =
        docs.keys().map(String::as_str).filter(|k| (k.starts_with("fleet_") || k.starts_with("forward_")) && *k != "fleet_listen").collect();
    let listed: std::collections::BTreeSet<&str> = alone.iter().map(|(k, _)| *k).filter(|k| *k != "llm_prefix_bytes").collect();
    assert_eq!(listed, tier_keys, "every tier key in the table is checked here");
    for (k, set) in &alone {
        let (_, meaning) = &docs[*k];
        assert!(meaning.starts_with("with ") && meaning.contains("`fleet_listen`"), "docs/agent.md's `{k}` row does not say it needs `fleet_listen`: {meaning}");
        assert_eq!(key_of(raw(|r| set(r))), *k);
    }
    std::fs::remove_file(&key).unwrap();
}

#[test]
fn fleet_advertise_takes_a_bare_ip_bracketed_when_ipv6() {
    let key = key_file("test-adv");
    let key = key.to_string_lossy().into_owned();
    let advertised = |listen: &str, fleet_listen: &str, adv: &str| {
        raw(|r| {
            r.listen = Some(listen.into());
            r.fleet_listen = Some(fleet_listen.into());
            r.fleet_peers = Some("127.0.0.2:9700".into());
            r.fleet_key_file = Some(key.clone());
            r.fleet_advertise = Some(adv.into());
        })
        .map(|c| c.fleet.unwrap())
    };
    // The sidecar's `--fleet-advertise=$(POD_IP)`: listen's port, an IPv6 one bracketed.
    let v6 = advertised("[::]:8080", "[::]:9700", "fd00::5").unwrap();
    assert_eq!((v6.advertise.as_str(), v6.from), ("[fd00::5]:8080", "[fd00::5]:9700".parse().unwrap()));
    assert!(huntlb_policy::forward::is_forward_addr(&v6.advertise));
    let v4 = advertised("0.0.0.0:8080", "0.0.0.0:9700", "10.1.2.3").unwrap();
    assert_eq!((v4.advertise.as_str(), v4.from), ("10.1.2.3:8080", "10.1.2.3:9700".parse().unwrap()));
    assert_eq!(advertised("[::]:8080", "[::]:9700", "[fd00::5]:8080").unwrap().advertise, "[fd00::5]:8080");
    // `$(POD_IP):8080` with an IPv6 pod IP is itself an IPv6 address, not this
    // host's: refused, naming the bracketed form, never taken as fd00::5:8080.
    let e = advertised("[::]:8080", "[::]:9700", "fd00::5:8080").unwrap_err().to_string();
    assert!(e.contains("fleet_advertise") && e.contains("[fd00::5]:8080"), "{e}");
    assert!(advertised("[::]:8080", "[::]:9700", "::").unwrap_err().to_string().contains("fleet_advertise"));
}

#[test]
fn forwarded_for_keys_are_checked_by_name() {
    use crate::forwarded::Prefix;
    let c = raw(|_| {}).unwrap();
    assert_eq!(c.forwarded_for.map(|f| f.trusted), Some(None), "on by default, appending to every peer's header");
    let c = raw(|r| r.forwarded_for_trusted = Some("10.0.0.0/8, fd00::1".into())).unwrap();
    assert_eq!(c.forwarded_for.unwrap().trusted, Some(vec![Prefix::parse("10.0.0.0/8").unwrap(), Prefix::parse("fd00::1").unwrap()]));
    let c = raw(|r| r.forwarded_for_trusted = Some("".into())).unwrap();
    assert_eq!(c.forwarded_for.unwrap().trusted, Some(vec![]), "empty: no peer's header kept");
    assert!(raw(|r| r.forwarded_for = Some("off".into())).unwrap().forwarded_for.is_none());
    assert_eq!(key_of(raw(|r| r.forwarded_for = Some("replace".into()))), "forwarded_for");
    assert_eq!(key_of(raw(|r| r.forwarded_for_trusted = Some("10.0.0.5/8".into()))), "forwarded_for_trusted");
    assert_eq!(key_of(raw(|r| r.forwarded_for_trusted = Some("front-1".into()))), "forwarded_for_trusted");
    assert_eq!(key_of(raw(|r| {
        r.forwarded_for = Some("off".into());
        r.forwarded_for_trusted = Some("10.0.0.1".into());
    })), "forwarded_for_trusted");
}
