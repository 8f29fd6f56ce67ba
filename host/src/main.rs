//! `stepstone`: the command-line host. Errors end here, as one clear line on
//! stderr and a non-zero exit.

mod cli;

use std::process::ExitCode;

use clap::Parser;
use stepstone::telemetry::{self, LogFormat, LogSettings, Telemetry, TraceExport};

fn main() -> ExitCode {
    quit_quietly_on_a_closed_pipe();
    let args = cli::Cli::parse();
    let telemetry = match start_telemetry(&args) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let format = args.log_format();
    let code = match runtime.block_on(cli::execute(args)) {
        Ok(code) => code,
        Err(e) => {
            report(format, &e);
            ExitCode::FAILURE
        }
    };
    drop(runtime);
    telemetry.shutdown();
    code
}

/// The error that ends the process, on stderr: `error: ...`, or with
/// `--log-format json` a JSON object shaped like the log lines, since a
/// log shipper reads every line as one (written here, not logged, so that
/// no `RUST_LOG` filters it out).
fn report(format: LogFormat, error: &anyhow::Error) {
    match format {
        LogFormat::Text => eprintln!("error: {error:#}"),
        LogFormat::Json => eprintln!(
            "{}",
            serde_json::json!({"level": "ERROR", "fields": {"message": format!("{error:#}")}})
        ),
    }
}

/// Log lines on stderr as `--log-format` and `RUST_LOG` say, and traces
/// where `OTEL_EXPORTER_OTLP_ENDPOINT` points, if it is set.
fn start_telemetry(args: &cli::Cli) -> Result<Telemetry, telemetry::TelemetryError> {
    let logs = LogSettings {
        format: args.log_format(),
        default_filter: args.default_log_filter(),
        ansi: std::io::IsTerminal::is_terminal(&std::io::stderr()),
    };
    telemetry::install(logs, std::io::stderr, TraceExport::from_env()?)
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
