//! `stepstone`: the command-line host. Errors end here, as one clear line on
//! stderr and a non-zero exit.

mod cli;

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    quit_quietly_on_a_closed_pipe();
    let args = cli::Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(args.default_log_filter())),
        )
        .with_writer(std::io::stderr)
        .with_target(false);
    match args.log_format() {
        cli::LogFormat::Json => logs.json().init(),
        cli::LogFormat::Text => logs
            .without_time()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::execute(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `stepstone history RUN | head` ends like `cat` would, without an error:
/// Rust ignores SIGPIPE, which turns a closed stdout into a panic in
/// `println!`. Sockets are unaffected: they write with `MSG_NOSIGNAL`.
fn quit_quietly_on_a_closed_pipe() {
    // SAFETY: called first thing in `main`, before any other thread exists,
    // and it only restores the default disposition of one signal.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
