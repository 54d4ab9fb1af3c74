//! `baton-example-worker [--local PATH --queue NAME] [--wait SECONDS]`: takes one team's tasks
//! until SIGTERM or Ctrl-C, one JSON line per message (and per try at its callback) on stdout.
//! Settings come from the environment (`Settings::from_env`), or with `--local` from the
//! `local.json` that `make run` writes, for the team's queue `--queue` names.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use baton_example_worker::{Handled, Settings, Worker};
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main]
async fn main() -> Result<()> {
    let (local, queue, wait) = arguments()?;
    let settings = match (local, queue) {
        (Some(path), Some(queue)) => Settings::from_local(&path, &queue)?,
        (Some(_), None) => bail!("--local needs --queue NAME: the team's queue, a task's `queue`"),
        (None, _) => Settings::from_env()?,
    };
    let queue = settings.queue_url.clone();
    let worker = Worker::new(settings).await?;
    let mut terminate = signal(SignalKind::terminate())?;
    println!("{}", serde_json::json!({"ready": queue}));
    let log = |line: Handled| match serde_json::to_string(&line) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("cannot write a log line: {e}"),
    };
    loop {
        // A stop drops the task in hand: SQS delivers it again once its visibility ends.
        tokio::select! {
            polled = worker.poll(wait, &log) => {
                if let Err(e) = polled {
                    // The queue did not answer: say so and try again, never in a tight loop.
                    println!("{}", serde_json::json!({"answer": "sqs_error", "message": format!("{e:#}")}));
                    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                }
            }
            _ = terminate.recv() => return Ok(()),
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

fn arguments() -> Result<(Option<PathBuf>, Option<String>, i32)> {
    let (mut local, mut queue, mut wait) = (None, None, 20);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--local" => local = Some(PathBuf::from(args.next().context("--local takes a path")?)),
            "--queue" => queue = Some(args.next().context("--queue takes the team's queue name")?),
            "--wait" => wait = args.next().context("--wait takes seconds")?.parse().context("--wait")?,
            other => bail!(
                "unknown argument {other}; usage: baton-example-worker [--local PATH --queue NAME] [--wait SECONDS]"
            ),
        }
    }
    Ok((local, queue, wait))
}
