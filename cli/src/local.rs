//! `baton local`: the whole of baton on this machine, with no AWS account.
//!
//! It starts the emulator (tools/emulator.py: moto with DynamoDB serialized and Step Functions
//! execution on), or connects to a running one; provisions what template.yaml declares, with the
//! state machines and the task queues generated from the config (as `baton synth` writes them); runs the template's functions in-process behind
//! local event source mappings, the HTTP API on 127.0.0.1, and the sweeper on its schedule; and
//! writes `.baton/local.json` for the operator commands. SIGINT or SIGTERM stops all of it,
//! the emulator included (SIGKILL if it ignores SIGTERM for 10 s).
//!
//! SIGHUP deploys the config file again: it is read and validated (an invalid file is refused
//! and the running stack kept); then the running functions stop, its state machines are
//! generated and updated on the emulator, and the functions start on it, on the same HTTP port
//! (a failure there stops `baton local`). Records in
//! flight finish on the config version they started on.
//!
//! Idle, nothing spins: the mappings sit in 20-second long polls, the sweeper sleeps.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use baton_core::domain::config::Config;
use baton_core::ports::metrics::Metrics;
use baton_core::use_cases::engine::system_clock;
use baton_local::in_process::{LocalBaton, LocalOptions};
use baton_local::info::LocalInfo;
use baton_local::{Clients, Template};
use tokio::process::{Child, Command};

/// `baton local`'s options.
pub struct LocalArgs {
    pub config: PathBuf,
    pub template: PathBuf,
    /// A running emulator to use instead of starting one.
    pub emulator: Option<String>,
    pub http_port: u16,
    /// The read-only console's port (0: any free port).
    pub console_port: u16,
    pub stack: String,
    pub state_dir: PathBuf,
    /// Template parameter values over their defaults (`--parameter NAME=VALUE`).
    pub parameters: std::collections::BTreeMap<String, String>,
}

/// The emulator this command started, stopped on drop paths explicitly by [`Emulator::stop`].
struct Emulator {
    child: Child,
}

impl Emulator {
    async fn start(state_dir: &Path) -> Result<(Emulator, String)> {
        let python = std::env::var("BATON_PYTHON").unwrap_or_else(|_| ".venv/bin/python".into());
        let ready = state_dir.join("emulator.url");
        let _ = std::fs::remove_file(&ready);
        let log = std::fs::File::create(state_dir.join("emulator.log"))
            .context("cannot create .baton/emulator.log")?;
        // BATON_EMULATOR_ARGS, as tools/with-emulator.sh takes them: `make test` has every
        // emulator record the functions' calls for the policy contract, this one's too.
        let extra = std::env::var("BATON_EMULATOR_ARGS").unwrap_or_default();
        let child = Command::new(&python)
            .args(["tools/emulator.py", "--port", "0", "--ready-file"])
            .arg(&ready)
            .args(extra.split_whitespace())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| {
                format!("cannot start the emulator with {python}; run `make tools` (or set BATON_PYTHON)")
            })?;
        let mut emulator = Emulator { child };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(url) = std::fs::read_to_string(&ready) {
                return Ok((emulator, url.trim().to_owned()));
            }
            if let Some(status) = emulator.child.try_wait()? {
                bail!("the emulator exited ({status}); see .baton/emulator.log");
            }
            if Instant::now() > deadline {
                emulator.stop().await;
                bail!("the emulator was not ready after 60 s; see .baton/emulator.log");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM, then SIGKILL after 10 s: moto sometimes ignores SIGTERM (docs/EMULATOR_DEVIATIONS.md).
    async fn stop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
            if tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await.is_ok() {
                return;
            }
        }
        let _ = self.child.kill().await;
    }
}

/// A fresh `whsec_` secret for this local stack.
fn local_secret() -> Result<String> {
    use base64::Engine as _;
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom for the local webhook secret")?;
    Ok(format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(bytes)))
}

pub async fn run(args: LocalArgs) -> Result<()> {
    let started = Instant::now();
    // The handlers log as they do in Lambda: JSON lines on stdout, beside the EMF metrics.
    baton_aws::wiring::init_tracing();
    let config = Config::load(&args.config)?;
    let template = std::fs::read_to_string(&args.template)
        .with_context(|| format!("cannot read the template {}", args.template.display()))?;
    // Parsed now, for the config about to run, so that a template baton cannot use stops here.
    template_for(&template, &config)?;
    std::fs::create_dir_all(&args.state_dir).context("cannot create the state directory")?;

    let root = args.state_dir.join("definitions");
    write_definitions(&config, &root)?;

    let (mut emulator, endpoint) = match &args.emulator {
        Some(url) => (None, url.clone()),
        None => {
            let (e, url) = Emulator::start(&args.state_dir).await?;
            (Some(e), url)
        }
    };
    let result = serve(&args, config, template, root, &endpoint, started).await;
    if let Some(e) = emulator.as_mut() {
        e.stop().await;
        println!("emulator stopped");
    }
    result
}

/// The template with its task queues written for `config`, parsed.
fn template_for(text: &str, config: &Config) -> Result<Template> {
    Template::parse_for(text, config)
        .map_err(|e| anyhow::anyhow!("{}", baton_core::domain::error::error_chain(&e)))
}

/// The config file read again, and the template for it: what a reload deploys.
fn reloaded(path: &Path, template: &str) -> Result<(Config, Template)> {
    let config = Config::load(path)?;
    let resources = template_for(template, &config)?;
    Ok((config, resources))
}

/// The definitions generated from `config`: the template's DefinitionUris resolve under `root`.
fn write_definitions(config: &Config, root: &Path) -> Result<()> {
    for (rel, text) in baton_core::domain::asl::render_all(config) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap_or(root))?;
        std::fs::write(&path, text)?;
    }
    Ok(())
}

async fn serve(
    args: &LocalArgs,
    config: Config,
    template: String,
    root: PathBuf,
    endpoint: &str,
    started: Instant,
) -> Result<()> {
    let clients = Clients::new(&baton_local::emulator_sdk_config(endpoint).await);
    let secret = local_secret()?;
    let options = |config: Config, http_port: u16| LocalOptions {
        config,
        root: root.clone(),
        stack_name: args.stack.clone(),
        parameters: args.parameters.clone(),
        webhook_secret: secret.clone(),
        env: Default::default(),
        visibility_timeout: None,
        wait_seconds: 20,
        metrics: Metrics::stdout(),
        clock: system_clock(),
        paused: Vec::new(),
        http_port,
        sweep_every: None,
    };
    let version = config.version.clone();
    let mut baton =
        LocalBaton::start(&template_for(&template, &config)?, &clients, options(config, args.http_port))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut info = baton.info(endpoint, &secret);
    let (console_url, console) = start_console(args, &clients, &baton, &info).await?;
    info.console_url = Some(console_url.clone());
    let info_path = args.state_dir.join("local.json");
    info.save(&info_path).context("cannot write .baton/local.json")?;

    println!("baton local ready in {:.1}s (config {version})", started.elapsed().as_secs_f64());
    println!("  callback API   {}/v1/callbacks", info.api_url);
    println!("  console        {console_url} (read-only)");
    println!("  emulator       {}", info.aws_endpoint);
    println!("  stack details  {}", info_path.display());
    println!("Try it:");
    println!("  baton send --type order.placed --subject order-1 --data '{{\"total\": 1500}}'");
    println!("  baton trace order-review order-1");
    println!(
        "  baton callback --workflow order-review --key order-1 --step manual-review --data '{{\"decision\": \"approve\"}}'"
    );
    println!("  baton status");
    println!(
        "Ctrl-C stops baton and the emulator; `kill -HUP {}` deploys {} again.",
        std::process::id(),
        args.config.display()
    );

    while wait_for_signal().await? == Signal::Reload {
        let (config, resources) = match reloaded(&args.config, &template) {
            Ok(reloaded) => reloaded,
            Err(e) => {
                eprintln!("reload refused, still running the previous config: {e:#}");
                continue;
            }
        };
        write_definitions(&config, &root)?;
        let port = info.api_url.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(args.http_port);
        let version = config.version.clone();
        baton.shutdown().await;
        baton = LocalBaton::start(&resources, &clients, options(config, port))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let info = LocalInfo { console_url: Some(console_url.clone()), ..baton.info(endpoint, &secret) };
        info.save(&info_path).context("cannot write .baton/local.json")?;
        println!("baton local reloaded (config {version})");
    }
    println!("stopping");
    console.abort();
    baton.shutdown().await;
    let _ = std::fs::remove_file(&info_path);
    Ok(())
}

/// The read-only console, on the stack just started (`console.rs`).
async fn start_console(
    args: &LocalArgs,
    clients: &Clients,
    baton: &LocalBaton,
    info: &LocalInfo,
) -> Result<(String, tokio::task::JoinHandle<()>)> {
    let engine = baton.engine().context("the local stack has no engine to plan replays with")?;
    let console = crate::console::Console {
        sources: crate::trace::Sources {
            store: crate::ops::store(clients.dynamodb.clone(), &info.table).await?,
            sfn: baton_aws::stepfunctions::StepFunctionsOrchestrator::new(clients.sfn.clone()),
            machines: crate::target::StateMachines::Listed {
                path: args.state_dir.join("local.json").display().to_string(),
                arns: info.state_machines.clone(),
            },
        },
        sqs: clients.sqs.clone(),
        engine,
        config: args.config.clone(),
        dlqs: vec![
            ("intake", info.queues.intake_dlq.clone(), baton_core::use_cases::replay::Origin::Intake),
            ("progress", info.queues.progress_dlq.clone(), baton_core::use_cases::replay::Origin::Progress),
        ],
    };
    crate::console::serve(console, args.console_port).await
}

#[derive(PartialEq)]
enum Signal {
    Stop,
    Reload,
}

async fn wait_for_signal() -> Result<Signal> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut hup = signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("cannot listen for SIGINT")?,
        _ = term.recv() => {}
        _ = hup.recv() => return Ok(Signal::Reload),
    }
    Ok(Signal::Stop)
}
