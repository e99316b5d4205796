//! The notes operator's binary: everything is in the library; windlass gives it its CLI.

fn main() -> std::process::ExitCode {
    windlass::cli::main(notes_operator::NotesController::new())
}
