//! `baton`: the operator CLI. Each subcommand lives in its own module; this file only parses the
//! command line and maps failures to exit codes (0 ok, 1 the input is invalid, 2 usage).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod inspect;
mod synth;

#[derive(Parser)]
#[command(name = "baton", version, about = "Event-driven workflow automation on AWS serverless")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a workflow config; print one summary line per workflow, or every problem found.
    Validate {
        /// The config file.
        #[arg(env = "BATON_CONFIG", default_value = baton::config::DEFAULT_PATH)]
        path: PathBuf,
    },
    /// Say which workflows an event would start, and the correlation key for each.
    Match {
        #[arg(long, env = "BATON_CONFIG", default_value = baton::config::DEFAULT_PATH)]
        config: PathBuf,
        /// A file holding the event: CloudEvents 1.0 JSON or an EventBridge event.
        event: PathBuf,
    },
    /// Generate infra/statemachines/<workflow>.asl.json from the config.
    Synth {
        #[arg(long, env = "BATON_CONFIG", default_value = baton::config::DEFAULT_PATH)]
        config: PathBuf,
        /// Verify instead of write: fail if a definition is stale, stray, has a token wait
        /// without a deadline, or template.yaml lacks its state machine.
        #[arg(long)]
        check: bool,
        /// The repository root the definitions are written under.
        #[arg(long, default_value = ".")]
        root: PathBuf,
        #[arg(long, default_value = "template.yaml")]
        template: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Validate { path } => inspect::validate(&path),
        Command::Match { config, event } => inspect::match_event(&config, &event),
        Command::Synth { config, check, root, template } => synth::synth(&config, &root, &template, check),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
