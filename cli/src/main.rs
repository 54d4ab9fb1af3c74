//! `baton`: the operator CLI. Each subcommand lives in its own module; this file only parses the
//! command line and maps failures to exit codes (0 ok, 1 the input is invalid, 2 usage;
//! `rollout plan`: 1 for a breaking change, 3 for one that needs a person, 2 for no verdict).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod compensate;
mod console;
mod end;
mod inspect;
mod local;
mod ops;
mod owes;
mod recover;
mod rollout;
mod send;
mod status;
mod synth;
mod target;
mod terminal;
mod trace;
mod web;

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
        #[arg(env = "BATON_CONFIG", default_value = baton_core::domain::config::DEFAULT_PATH)]
        path: PathBuf,
    },
    /// Say which workflows an event would start, and the correlation key for each.
    Match {
        #[arg(long, env = "BATON_CONFIG", default_value = baton_core::domain::config::DEFAULT_PATH)]
        config: PathBuf,
        /// A file holding the event: CloudEvents 1.0 JSON or an EventBridge event.
        event: PathBuf,
    },
    /// Generate infra/statemachines/<workflow>.asl.json from the config.
    Synth {
        #[arg(long, env = "BATON_CONFIG", default_value = baton_core::domain::config::DEFAULT_PATH)]
        config: PathBuf,
        /// Verify instead of write: fail if a definition is stale, stray, has a token wait
        /// without a deadline, template.yaml lacks its state machine, or its task queues are
        /// not the config's.
        #[arg(long)]
        check: bool,
        /// The repository root the definitions are written under.
        #[arg(long, default_value = ".")]
        root: PathBuf,
        #[arg(long, default_value = "template.yaml")]
        template: PathBuf,
    },
    /// Run all of baton on this machine: emulator, template.yaml's resources, the handlers, the
    /// HTTP API and the sweeper. Ctrl-C stops everything it started.
    Local {
        #[arg(long, env = "BATON_CONFIG", default_value = baton_core::domain::config::DEFAULT_PATH)]
        config: PathBuf,
        #[arg(long, default_value = "template.yaml")]
        template: PathBuf,
        /// Use this running emulator instead of starting one.
        #[arg(long, env = "BATON_EMULATOR_URL")]
        emulator: Option<String>,
        /// The HTTP API's port on 127.0.0.1 (0: any free port).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// The read-only console's port on 127.0.0.1 (0: any free port).
        #[arg(long, default_value_t = 0)]
        console_port: u16,
        /// The stack name resources are named after.
        #[arg(long, default_value = "baton-local")]
        stack: String,
        /// Where local.json, the generated definitions and the emulator log go.
        #[arg(long, default_value = ".baton")]
        state_dir: PathBuf,
        /// A template parameter's value over its default, as `sam deploy --parameter-overrides`
        /// takes it (repeatable): e.g. `--parameter CallbackApiRateLimit=5`.
        #[arg(long = "parameter", value_name = "NAME=VALUE", value_parser = parameter)]
        parameters: Vec<(String, String)>,
    },
    /// Publish a domain event (CloudEvents 1.0 or EventBridge) to the intake queue.
    Send(send::SendArgs),
    /// Send a signed callback to the HTTP API, as an external system would.
    Callback(send::CallbackArgs),
    /// One workflow record's timeline: transitions, tasks, callbacks, buffered and ignored
    /// inputs, and the Step Functions history of each generation.
    Trace(trace::TraceArgs),
    /// Records by state, and the records waiting past their deadline.
    Status(status::StatusArgs),
    /// The tasks people owe an answer to, by queue: how old, how many reminders, which
    /// escalation level, which past their deadline.
    Owes(owes::OwesArgs),
    /// Plan (and with --apply, carry out) the re-delivery of dead-lettered messages or ledgered
    /// inputs, from the current state: safe, noop or needs-human per message.
    Replay(recover::ReplayArgs),
    /// Move dead-lettered messages back to their source queue, after showing the plan.
    Redrive(recover::RedriveArgs),
    /// Cancel a workflow: the record becomes cancelled and its execution is stopped; with
    /// --compensate, what completed is undone first, last first.
    Cancel(recover::CancelArgs),
    /// Compensation: `plan` shows, for one record, what would be, is being or was undone.
    Compensate(compensate::CompensateArgs),
    /// End a record whose execution is gone (stranded, or ended without its report): a plan
    /// of what it becomes and what stays undone, then `--apply --expect-version N`.
    End(end::EndArgs),
    /// Before a deploy: what a config change would do to the records in flight.
    Rollout(rollout::RolloutArgs),
}

/// Runs an async command on a fresh Tokio runtime.
/// `NAME=VALUE`, for `baton local --parameter`.
fn parameter(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => Ok((name.trim().to_owned(), value.to_owned())),
        _ => Err(format!("expected NAME=VALUE, got {arg:?}")),
    }
}

fn block_on<F: std::future::Future<Output = anyhow::Result<()>>>(command: F) -> anyhow::Result<()> {
    tokio::runtime::Runtime::new()?.block_on(command)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Validate { path } => inspect::validate(&path),
        Command::Match { config, event } => inspect::match_event(&config, &event),
        Command::Synth { config, check, root, template } => synth::synth(&config, &root, &template, check),
        Command::Local { config, template, emulator, port, console_port, stack, state_dir, parameters } => {
            block_on(local::run(local::LocalArgs {
                config,
                template,
                emulator,
                http_port: port,
                console_port,
                stack,
                state_dir,
                parameters: parameters.into_iter().collect(),
            }))
        }
        Command::Send(args) => block_on(send::send(args)),
        Command::Callback(args) => block_on(send::callback(args)),
        Command::Trace(args) => block_on(trace::run(args)),
        Command::Status(args) => block_on(status::run(args)),
        Command::Owes(args) => block_on(owes::run(args)),
        Command::Replay(args) => block_on(recover::replay(args)),
        Command::Redrive(args) => block_on(recover::redrive(args)),
        Command::Cancel(args) => block_on(recover::cancel(args)),
        Command::Compensate(args) => block_on(compensate::run(args)),
        Command::End(args) => block_on(end::run(args)),
        Command::Rollout(args) => {
            // Its own exit status: 1 breaking, 3 needs a person; 2 when no verdict could be
            // reached (the table unreadable, say), so that a pipeline never reads a failure as
            // a breaking change.
            return match tokio::runtime::Runtime::new()
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(rollout::run(args)))
            {
                Ok(status) => ExitCode::from(status),
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::from(2)
                }
            };
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
