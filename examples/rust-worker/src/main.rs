//! `baton-example-worker [--local PATH] [--wait SECONDS]`: takes baton's tasks until SIGTERM or
//! Ctrl-C, one JSON line per message on stdout. Settings come from the environment
//! (`Settings::from_env`), or with `--local` from the `local.json` that `make run` writes.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use baton_example_worker::{Settings, Worker};
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main]
async fn main() -> Result<()> {
    let (local, wait) = arguments()?;
    let settings = match local {
        Some(path) => Settings::from_local(&path)?,
        None => Settings::from_env()?,
    };
    let queue = settings.queue_url.clone();
    let worker = Worker::new(settings).await?;
    let mut terminate = signal(SignalKind::terminate())?;
    println!("{}", serde_json::json!({"ready": queue}));
    loop {
        // A stop waits for no more than the current poll: the message in hand is finished first.
        let handled = tokio::select! {
            handled = worker.poll(wait) => handled?,
            _ = terminate.recv() => return Ok(()),
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        for line in handled {
            println!("{}", serde_json::to_string(&line)?);
        }
    }
}

fn arguments() -> Result<(Option<PathBuf>, i32)> {
    let (mut local, mut wait) = (None, 20);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--local" => local = Some(PathBuf::from(args.next().context("--local takes a path")?)),
            "--wait" => wait = args.next().context("--wait takes seconds")?.parse().context("--wait")?,
            other => {
                bail!("unknown argument {other}; usage: baton-example-worker [--local PATH] [--wait SECONDS]")
            }
        }
    }
    Ok((local, wait))
}
