//! The backup script itself, run with bash, gzip and openssl as a backup pod runs it (the
//! test control plane's node simulator completes pods without running them): a stand-in
//! `pg_dump` on the PATH records how it was called and prints a dump. The backup must be
//! readable with the key, and only the newest `RETENTION` backups may be left.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

const SCRIPT: &str = include_str!("../src/backup.sh");

/// A `pg_dump` that prints its arguments and the password it got, as SQL comments.
const FAKE_PG_DUMP: &str = r#"#!/bin/bash
echo "-- pg_dump $*"
echo "-- password ${PGPASSWORD}"
echo "CREATE TABLE orders (id int);"
"#;

fn run_script(dir: &Path, retention: u32, key: &str) -> std::process::Output {
    let bin = dir.join("bin");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    Command::new("bash")
        .arg(dir.join("backup.sh"))
        .env("PATH", path)
        .env("BACKUP_NAME", "shop-db")
        .env("BACKUP_DIR", dir.join("backups"))
        .env("RETENTION", retention.to_string())
        .env("DB_HOST", "shop-db")
        .env("DB_PORT", "5432")
        .env("DB_NAME", "shop")
        .env("DB_USER", "backup")
        .env("DB_PASSWORD", "s3cret")
        .env("ENCRYPTION_KEY", key)
        .output()
        .expect("bash runs (the script needs bash, gzip and openssl)")
}

fn backups(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("backups"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn the_script_writes_an_encrypted_dump_and_keeps_the_newest_backups() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::create_dir_all(dir.join("backups")).unwrap();
    std::fs::write(dir.join("backup.sh"), SCRIPT).unwrap();
    let fake = dir.join("bin/pg_dump");
    std::fs::write(&fake, FAKE_PG_DUMP).unwrap();
    let chmod = Command::new("chmod").arg("+x").arg(&fake).status().unwrap();
    assert!(chmod.success());

    // Four older backups, a day apart, and another Backup's file that must stay.
    for day in 1..=4 {
        let old = dir.join(format!("backups/shop-db-2020010{day}T030000Z.sql.gz.enc"));
        std::fs::write(&old, "old").unwrap();
        let touched = Command::new("touch")
            .arg("-d")
            .arg(format!("2020-01-0{day} 03:00:00"))
            .arg(&old)
            .status()
            .unwrap();
        assert!(touched.success());
    }
    std::fs::write(dir.join("backups/other-20200101T030000Z.sql.gz.enc"), "x").unwrap();

    let key = "0f".repeat(32);
    let output = run_script(dir, 3, &key);
    let log = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{log}");

    // The new backup and the two newest old ones are left, and the other Backup's file.
    let left = backups(dir);
    assert_eq!(left.len(), 4, "{left:?}\n{log}");
    assert!(left.contains(&"shop-db-20200104T030000Z.sql.gz.enc".to_string()));
    assert!(left.contains(&"shop-db-20200103T030000Z.sql.gz.enc".to_string()));
    assert!(left.contains(&"other-20200101T030000Z.sql.gz.enc".to_string()));
    assert!(
        log.contains("removed") && log.contains("shop-db-20200101T030000Z"),
        "{log}"
    );
    let new = left
        .iter()
        .find(|n| n.starts_with("shop-db-") && !n.starts_with("shop-db-2020"))
        .unwrap_or_else(|| panic!("no new backup in {left:?}"));
    assert!(!left.iter().any(|n| n.ends_with(".partial")));

    // It decrypts with the key, and holds what pg_dump printed for the right database.
    let decrypted = Command::new("bash")
        .arg("-c")
        .arg("openssl enc -d -aes-256-cbc -pbkdf2 -pass env:ENCRYPTION_KEY -in \"$1\" | gunzip")
        .arg("decrypt")
        .arg(dir.join("backups").join(new))
        .env("ENCRYPTION_KEY", &key)
        .output()
        .unwrap();
    let dump = String::from_utf8_lossy(&decrypted.stdout);
    assert!(decrypted.status.success(), "{dump}");
    assert!(
        dump.contains("-- pg_dump --host shop-db --port 5432 --username backup --no-password shop"),
        "{dump}"
    );
    assert!(dump.contains("-- password s3cret") && dump.contains("CREATE TABLE orders"));

    // And not with another key.
    let wrong = Command::new("bash")
        .arg("-c")
        .arg("openssl enc -d -aes-256-cbc -pbkdf2 -pass pass:wrong -in \"$1\" | gunzip")
        .arg("decrypt")
        .arg(dir.join("backups").join(new))
        .output()
        .unwrap();
    assert!(!wrong.status.success());
}

#[test]
fn a_failing_dump_fails_the_backup_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::create_dir_all(dir.join("backups")).unwrap();
    std::fs::write(dir.join("backup.sh"), SCRIPT).unwrap();
    let fake = dir.join("bin/pg_dump");
    std::fs::write(
        &fake,
        "#!/bin/bash\necho 'connection refused' >&2\nexit 1\n",
    )
    .unwrap();
    assert!(
        Command::new("chmod")
            .arg("+x")
            .arg(&fake)
            .status()
            .unwrap()
            .success()
    );
    let output = run_script(dir, 3, &"0f".repeat(32));
    assert!(!output.status.success(), "pipefail fails the Job's pod");
    assert_eq!(backups(dir), Vec::<String>::new(), "nothing is left behind");
}
