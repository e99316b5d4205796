//! `greeting-operator`: run, dry-run, print the CRD or what installs it.

fn main() -> std::process::ExitCode {
    windlass::cli::main(greeting_operator::GreetingController)
}
