fn main() -> std::process::ExitCode {
    haita::cli::main()
}
