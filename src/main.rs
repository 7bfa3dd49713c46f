use clap::Parser;

use msgw::app::{Application, shutdown_signal};
use msgw::config::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            msgw::telemetry::init(&args.log)?;
            let config = args.into_config()?;
            let app = Application::build(config).await?;
            app.run(shutdown_signal()).await
        }
        Command::Sandbox(args) => {
            msgw::telemetry::init(&args.log)?;
            let config = args.config()?;
            let listener = tokio::net::TcpListener::bind(args.addr).await?;
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
