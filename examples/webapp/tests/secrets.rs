//! Secret values never leave the Secret: the example operator's dry run, logging
//! everything (`trace`) as text and as JSON, and `describe` of the same files, print none
//! of the database password it generates, in clear or in base64; the dump of what it would
//! apply holds it, readable by the operator's user only.

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

const SHOP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/shop.yaml");

/// `webapp-operator args…`: its exit status and everything it wrote, stdout and stderr.
fn run(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_webapp-operator"))
        .args(args)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{args:?}:\n{text}");
    text
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", path.display());
            found.extend(files(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// The values of the Secrets dumped under `dir`, as stored (base64) and decoded.
fn dumped_secret_values(dir: &Path) -> Vec<String> {
    let mut values = Vec::new();
    for file in files(dir) {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_saphyr::from_multiple::<Value>(&text).unwrap() {
            if doc["kind"] != "Secret" {
                continue;
            }
            for value in doc["data"].as_object().into_iter().flat_map(|d| d.values()) {
                let encoded = value.as_str().unwrap().to_string();
                let decoded: Vec<u8> = serde_json::from_value::<k8s_openapi::ByteString>(
                    Value::String(encoded.clone()),
                )
                .unwrap()
                .0;
                values.push(String::from_utf8(decoded).unwrap());
                values.push(encoded);
            }
        }
    }
    values
}

#[test]
fn no_output_of_a_dry_run_or_describe_holds_a_secret_value() {
    let mut outputs = Vec::new();
    let mut secrets = Vec::new();
    for format in ["text", "json"] {
        let dumps = tempfile::tempdir().unwrap();
        let dir = dumps.path().to_str().unwrap();
        outputs.push(run(&[
            "run",
            "--dry-run",
            SHOP,
            "--log-level",
            "trace",
            "--log-format",
            format,
            "--dump-dir",
            dir,
        ]));
        let found = dumped_secret_values(dumps.path());
        assert!(!found.is_empty(), "the dump holds the generated password");
        secrets.extend(found);
    }
    for output in ["text", "json"] {
        let dumps = tempfile::tempdir().unwrap();
        outputs.push(run(&[
            "describe",
            "webapp/shop",
            "-n",
            "shop",
            "--dry-run",
            "-f",
            SHOP,
            "-o",
            output,
            "--log-level",
            "trace",
            "--dump-dir",
            dumps.path().to_str().unwrap(),
        ]));
        secrets.extend(dumped_secret_values(dumps.path()));
    }
    // Each run generated its own password; none may appear in any output.
    for secret in &secrets {
        assert!(secret.len() >= 16, "a distinctive value: {secret}");
        for output in &outputs {
            assert!(
                !output.contains(secret.as_str()),
                "a Secret value leaked into the output:\n{output}"
            );
        }
    }
}
