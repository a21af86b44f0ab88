//! The agent binary on a config file with a mistake: it stops before serving,
//! exits 2, and its one line names the file, the line and column, and the key.

use std::process::Command;

#[test]
fn a_bad_config_file_exits_2_naming_file_line_column_and_key() {
    let dir = std::env::temp_dir().join(format!("huntlb-agent-bad-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("agent.toml");
    // an operator's mistake: a number written as a string, on line 3
    std::fs::write(&file, "# /etc/huntlb/agent.toml\napp = \"127.0.0.1:9000\"\nworkers = \"32\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_huntlb-agent")).arg("--config").arg(&file).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let want = format!("huntlb-agent: {}:3:11: config key `workers`: invalid type: string \"32\", expected u32\n", file.display());
    assert_eq!(stderr, want);
}
