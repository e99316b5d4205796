//! Heat-style periodic tasks: timing, error handling, inheritance and per-instance counters.

use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use windlass_tasks::periodic::{
    ErrorPolicy, PeriodicSetError, PeriodicTaskError, PeriodicTaskSet, PeriodicTasks,
};

/// The context every test task gets: a shared log of "task@tick" lines and the current tick.
#[derive(Clone, Default)]
struct Ctx {
    log: Arc<Mutex<Vec<String>>>,
    tick: Arc<Mutex<u32>>,
}

impl Ctx {
    fn record(&self, task: &str) {
        let tick = *self.tick.lock();
        self.log.lock().push(format!("{task}@{tick}"));
    }
    fn taken(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock())
    }
}

type Result<T> = std::result::Result<T, PeriodicSetError>;

fn recording(
    set: PeriodicTaskSet<Ctx>,
    name: &'static str,
    ticks_between_runs: u32,
) -> Result<PeriodicTaskSet<Ctx>> {
    set.task(name, ticks_between_runs, move |ctx: Ctx| async move {
        ctx.record(name);
        Ok::<(), String>(())
    })
}

async fn tick_n(tasks: &mut PeriodicTasks<Ctx>, ctx: &Ctx, from: u32, to: u32) {
    for t in from..=to {
        *ctx.tick.lock() = t;
        if let Err(e) = tasks.tick(ctx, ErrorPolicy::LogAndContinue).await {
            panic!("{e}");
        }
    }
}

#[tokio::test]
async fn heat_timing_n2_runs_on_ticks_3_6_9() -> Result<()> {
    let set = recording(PeriodicTaskSet::new("Manager"), "every", 0)?;
    let set = recording(set, "n2", 2)?;
    let mut tasks = set.instance();
    let ctx = Ctx::default();
    tick_n(&mut tasks, &ctx, 1, 9).await;
    let n2: Vec<String> = ctx
        .taken()
        .into_iter()
        .filter(|l| l.starts_with("n2@"))
        .collect();
    assert_eq!(n2, ["n2@3", "n2@6", "n2@9"]);
    Ok(())
}

#[tokio::test]
async fn tasks_run_in_order_and_the_report_says_what_happened() -> Result<()> {
    let set = recording(PeriodicTaskSet::new("M"), "a", 0)?;
    let set = recording(set, "b", 1)?;
    let set = recording(set, "c", 0)?;
    let mut tasks = set.instance();
    let ctx = Ctx::default();
    let report = match tasks.tick(&ctx, ErrorPolicy::LogAndContinue).await {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(ctx.taken(), ["a@0", "c@0"]);
    assert_eq!(report.ran, ["M.a", "M.c"]);
    assert_eq!(report.skipped, [("M.b".to_string(), 0)]);
    assert_eq!(tasks.ticks_to_skip("b"), Some(0));
    let _ = tasks.tick(&ctx, ErrorPolicy::LogAndContinue).await;
    assert_eq!(ctx.taken(), ["a@0", "b@0", "c@0"]);
    assert_eq!(tasks.ticks_to_skip("b"), Some(1));
    assert_eq!(tasks.ticks_to_skip("nope"), None);
    Ok(())
}

fn with_failing(set: PeriodicTaskSet<Ctx>) -> Result<PeriodicTaskSet<Ctx>> {
    let set = recording(set, "first", 0)?;
    let set = set.task("fails", 0, |ctx: Ctx| async move {
        ctx.record("fails");
        Err::<(), _>("disk full")
    })?;
    let set = set.task("panics", 0, |ctx: Ctx| async move {
        ctx.record("panics");
        if *ctx.tick.lock() < u32::MAX {
            panic!("bug in task");
        }
        Ok::<(), String>(())
    })?;
    recording(set, "last", 0)
}

#[tokio::test]
async fn a_failing_task_never_stops_the_others() -> Result<()> {
    let mut tasks = with_failing(PeriodicTaskSet::new("M"))?.instance();
    let ctx = Ctx::default();
    for _ in 0..3 {
        let report = match tasks.tick(&ctx, ErrorPolicy::LogAndContinue).await {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(report.ran, ["M.first", "M.last"]);
        assert_eq!(
            report.failed,
            [
                ("M.fails".to_string(), "disk full".to_string()),
                ("M.panics".to_string(), "panicked: bug in task".to_string())
            ]
        );
    }
    assert_eq!(ctx.taken().len(), 12);
    Ok(())
}

#[tokio::test]
async fn raise_on_error_stops_the_tick_at_the_failing_task() -> Result<()> {
    let mut tasks = with_failing(PeriodicTaskSet::new("M"))?.instance();
    let ctx = Ctx::default();
    let err = tasks.tick(&ctx, ErrorPolicy::Raise).await;
    assert_eq!(
        err,
        Err(PeriodicTaskError {
            task: "M.fails".to_string(),
            message: "disk full".to_string()
        })
    );
    assert_eq!(ctx.taken(), ["first@0", "fails@0"]);
    assert_eq!(
        err.map_err(|e| e.to_string()).err().as_deref(),
        Some("periodic task M.fails failed: disk full")
    );
    Ok(())
}

/// Each instance has its own skip counters; in Heat all instances of a class share them.
#[tokio::test]
async fn skip_counters_belong_to_each_instance() -> Result<()> {
    let set = recording(PeriodicTaskSet::new("M"), "n2", 2)?;
    let (mut one, mut two) = (set.instance(), set.instance());
    let (ctx_one, ctx_two) = (Ctx::default(), Ctx::default());
    // Tick `one` twice: with shared counters `two` would now run on its first tick.
    tick_n(&mut one, &ctx_one, 1, 2).await;
    assert_eq!(one.ticks_to_skip("n2"), Some(0));
    assert_eq!(two.ticks_to_skip("n2"), Some(2));
    tick_n(&mut two, &ctx_two, 1, 3).await;
    assert_eq!(ctx_two.taken(), ["n2@3"]);
    tick_n(&mut one, &ctx_one, 3, 3).await;
    assert_eq!(ctx_one.taken(), ["n2@3"]);
    // A fresh instance starts from the top, whatever the others did.
    assert_eq!(set.instance().ticks_to_skip("n2"), Some(2));
    Ok(())
}

#[tokio::test]
async fn inheritance_copies_the_parent_and_leaves_it_alone() -> Result<()> {
    let parent = recording(PeriodicTaskSet::new("Base"), "a", 0)?;
    let parent = recording(parent, "b", 0)?;
    let child = PeriodicTaskSet::inherit("Child", &parent);
    let child = recording(child, "c", 1)?;
    let child = child.replace_task("a", 0, |ctx: Ctx| async move {
        ctx.record("a-overridden");
        Ok::<(), String>(())
    })?;
    assert_eq!(
        child.tasks().collect::<Vec<_>>(),
        [("a", 0), ("b", 0), ("c", 1)]
    );
    assert_eq!(parent.tasks().collect::<Vec<_>>(), [("a", 0), ("b", 0)]);
    let ctx = Ctx::default();
    let report = match child.instance().tick(&ctx, ErrorPolicy::Raise).await {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(report.ran, ["Child.a", "Child.b"]);
    assert_eq!(ctx.taken(), ["a-overridden@0", "b@0"]);
    let _ = parent.instance().tick(&ctx, ErrorPolicy::Raise).await;
    assert_eq!(ctx.taken(), ["a@0", "b@0"]);
    Ok(())
}

#[test]
fn bad_registrations_are_refused() -> Result<()> {
    let set = recording(PeriodicTaskSet::new("M"), "a", 0)?;
    assert_eq!(
        recording(set.clone(), "a", 3).err(),
        Some(PeriodicSetError::DuplicateTask("a".to_string()))
    );
    assert_eq!(
        recording(set.clone(), "", 0).err(),
        Some(PeriodicSetError::EmptyName)
    );
    let replaced = set.replace_task("zzz", 0, |_ctx: Ctx| async { Ok::<(), String>(()) });
    assert_eq!(
        replaced.err(),
        Some(PeriodicSetError::UnknownTask("zzz".to_string()))
    );
    let msg = PeriodicSetError::DuplicateTask("a".into()).to_string();
    assert!(msg.contains("replace_task"), "{msg}");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn run_ticks_every_period_until_cancelled() -> Result<()> {
    let set = recording(PeriodicTaskSet::new("M"), "every", 0)?;
    let set = recording(set, "n2", 2)?;
    let mut tasks = set.instance();
    let ctx = Ctx::default();
    let shutdown = CancellationToken::new();
    let stopper = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            // Ticks at 0, 10, …, 90 s: ten ticks, then stop at 95 s.
            tokio::time::sleep(Duration::from_secs(95)).await;
            shutdown.cancel();
        })
    };
    let result = tasks
        .run(
            ctx.clone(),
            Duration::from_secs(10),
            ErrorPolicy::LogAndContinue,
            shutdown,
        )
        .await;
    assert_eq!(result, Ok(()));
    if let Err(e) = stopper.await {
        panic!("{e}");
    }
    let log = ctx.taken();
    assert_eq!(log.iter().filter(|l| l.starts_with("every")).count(), 10);
    assert_eq!(log.iter().filter(|l| l.starts_with("n2")).count(), 3);
    Ok(())
}
