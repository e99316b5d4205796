//! One operator binary, two controllers: the webapp example's WebApps and the backup
//! example's Backups, reconciled by one process with one client, one set of caches, one
//! leadership and one metrics endpoint. Every command covers both: `crds` prints both
//! CRDs, `rbac` and `manifests` grant what both need, `run --dry-run` reconciles each CR
//! with the controller of its kind.

fn main() -> std::process::ExitCode {
    windlass::cli::Operator::new("shop-operator")
        .controller(webapp_operator::WebAppController)
        .controller(backup_operator::BackupController::default())
        .main()
}
