use msgw::process::app::{Application, shutdown_signal};
use msgw::process::cli::{Cli, Command};
use msgw::process::config::{Problem, Problems};

fn main() {
    let cli = match msgw::process::config::problems::parse(std::env::args_os().collect()) {
        Ok((Some(cli), problems)) if problems.is_empty() => cli,
        // Every bad value at once, and what `serve`'s own checks find besides.
        Ok((cli, mut problems)) => {
            if let Some(Cli {
                command: Command::Serve(args),
            }) = cli
                && let Err(error) = args.into_config()
            {
                match error.downcast::<Problems>() {
                    Ok(more) => problems.extend(more.0),
                    Err(error) => eprintln!("msgw: {}", one_line(&error)),
                }
            }
            exit_with(&Problems(problems));
        }
        Err(error) => error.exit(),
    };
    if let Err(error) = start(cli) {
        match error.downcast_ref::<Problems>() {
            Some(problems) => exit_with(problems),
            None => {
                // One line: what failed, its cause and the fix, each said once (a
                // database error repeats its message at every layer of the chain).
                eprintln!("msgw: {}", one_line(&error));
                std::process::exit(1);
            }
        }
    }
}

/// Prints each problem on a line of its own and exits with 2 (a usage error, as clap).
fn exit_with(problems: &Problems) -> ! {
    for line in problems.lines() {
        eprintln!("msgw: {line}");
    }
    std::process::exit(2);
}

/// An error chain as one line, each cause that repeats what came before left out.
fn one_line(error: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

fn start(cli: Cli) -> anyhow::Result<()> {
    let configured = match &cli.command {
        Command::Serve(args) => args.worker_threads.map(usize::from),
        Command::Sandbox(_) | Command::CopyStore(_) | Command::Guard(_) | Command::Options => None,
        // A client: one thread is plenty.
        Command::Check(_) => Some(1),
    };
    let workers = configured.unwrap_or_else(msgw::process::cpus::worker_threads);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    runtime.block_on(run(cli, workers, configured.is_some()))
}

async fn run(cli: Cli, workers: usize, configured: bool) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let telemetry = msgw::process::telemetry::init(&args.log)?;
            let config = args.into_config()?;
            let app = Application::build(config).await?;
            if env!("MSGW_OPT_LEVEL") == "0" {
                tracing::warn!(
                    "this msgw is built without optimisation (the quick profile: quick to build, to try msgw, several times slower); deploy the dist build (cargo install --path . --locked --profile dist, or the Docker image)"
                );
            }
            if telemetry.exports_traces() {
                tracing::info!("exporting traces over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT)");
            }
            let source = if configured {
                "MSGW_WORKER_THREADS"
            } else {
                "CPU limit"
            };
            tracing::info!(workers, source, "tokio worker threads");
            app.run(shutdown_signal()).await
        }
        Command::Check(args) => msgw::process::check::run(&args).await,
        Command::CopyStore(args) => {
            let password = args.password()?;
            let copied = msgw::adapters::store::copy::run(
                &args.from,
                &args.to,
                args.to_direct.as_deref(),
                password.as_ref(),
            )
            .await?;
            println!("copied {copied}");
            Ok(())
        }
        Command::Guard(args) => {
            for line in args.run().await? {
                println!("{line}");
            }
            Ok(())
        }
        Command::Options => {
            println!("{}", msgw::process::config::options::json());
            Ok(())
        }
        Command::Sandbox(args) => {
            let _telemetry = msgw::process::telemetry::init(&args.log)?;
            let config = args.config();
            let listener = msgw::transport::listen::Listeners::bind(&args.addr).map_err(|e| {
                Problems(vec![
                    Problem::listen("addr", &args.addr, &e).for_command("sandbox"),
                ])
            })?;
            tracing::info!(api_key = %config.api_key, "sandbox gateway only: POST /api/json.php");
            msgw::sandbox::serve(
                listener,
                msgw::sandbox::Sandbox::new(config),
                shutdown_signal(),
            )
            .await?;
            Ok(())
        }
    }
}
