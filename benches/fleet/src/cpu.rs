//! Where a phase's CPU time went, by process: the runners' evidence for what a phase
//! cost the API server and etcd, as opposed to the operator or the benchmark's client.

use std::process::Command;
use std::time::Duration;

use windlass_testenv::TestEnv;

/// CPU time (user + system) by process: the control plane's, the operator's and this
/// benchmark's own. They share the machine's cores, so a phase's wall time is bounded
/// below by their sum over the core count; this says which process the time went to.
#[derive(Clone, Default)]
pub struct Cpu(Vec<(String, Duration)>);

impl Cpu {
    /// The CPU time each process has used so far.
    pub fn now(env: &TestEnv, operator: Option<u32>) -> Cpu {
        let mut processes: Vec<(String, u32)> = env
            .processes()
            .into_iter()
            .map(|p| (p.name.to_string(), p.pid))
            .collect();
        processes.extend(operator.map(|pid| ("operator".to_string(), pid)));
        processes.push(("bench client".to_string(), std::process::id()));
        Cpu(processes
            .into_iter()
            .filter_map(|(name, pid)| Some((name, cpu_time(pid)?)))
            .collect())
    }

    /// What each process used since `earlier`.
    pub fn since(&self, earlier: &Cpu) -> Cpu {
        Cpu(self
            .0
            .iter()
            .map(|(name, t)| {
                let before = earlier.0.iter().find(|(n, _)| n == name).map(|(_, t)| *t);
                (name.clone(), t.saturating_sub(before.unwrap_or_default()))
            })
            .collect())
    }

    /// What the process `name` (`kube-apiserver`, `etcd`, `operator`, …) used.
    pub fn of(&self, name: &str) -> Duration {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .unwrap_or_default()
    }

    /// What all of them used.
    pub fn total(&self) -> Duration {
        self.0.iter().map(|(_, t)| *t).sum()
    }

    /// `kube-apiserver 3.1 s, etcd 1.2 s, …, total 6.0 s`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .0
            .iter()
            .map(|(name, t)| format!("{name} {:.1} s", t.as_secs_f64()))
            .collect();
        parts.push(format!("total {:.1} s", self.total().as_secs_f64()));
        parts.join(", ")
    }
}

/// The fields of `/proc/<pid>/stat` after the command name: `fields[k - 3]` is field `k`
/// of proc(5) (`state` is field 3, `pgrp` 5, `utime` 14). `None` if there is no such
/// process.
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: the fields that follow it start after its `)`.
    Some(
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    )
}

/// User + system time of process `pid` (all its threads), from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Option<Duration> {
    let fields = stat_fields(pid)?;
    // utime and stime are fields 14 and 15 of proc(5).
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64))
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`; 100 on Linux everywhere in
/// practice, and the fallback).
fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100)
    })
}
