//! The `waft` binary: parses the command line and hands over to the library.

fn main() -> std::process::ExitCode {
    waft_cli::main()
}
