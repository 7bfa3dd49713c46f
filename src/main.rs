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
    }
}
