//! pubjson-relay: streams a pubjson slot (format 3) into NATS JetStream
//! or Kafka and confirms to PostgreSQL only what the broker acknowledged.
//! docs/relay.md describes it; `pubjson-relay --help` lists the flags.
//!
//! Exit status: 0 after a shutdown (SIGTERM, SIGINT) that drained, 2 for
//! a configuration PostgreSQL or the broker refuses (or the relay's own
//! settings), 1 for any other error that stops it.

mod config;
mod conninfo;
mod format;
mod metrics;
mod pg;
mod relay;
mod route;
mod sink;
mod tls;

use clap::Parser;
use std::process::ExitCode;
use std::sync::Arc;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let flags = config::Flags::parse();
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("PUBJSON_RELAY_LOG", "info"))
        .format_target(false)
        .init();
    let file_text = match &flags.config {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(t) => Some(t),
            Err(e) => {
                log::error!("cannot read the configuration file {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let settings = match config::settings(file_text.as_deref(), &flags) {
        Ok(s) => s,
        Err(e) => {
            log::error!("configuration: {e}");
            return ExitCode::from(2);
        }
    };
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let ci = match conninfo::resolve(&settings.conninfo.0, &|name| std::env::var(name).ok(), home) {
        Ok(c) => c,
        Err(e) => {
            log::error!("connection settings: {e}");
            return ExitCode::from(2);
        }
    };
    if flags.check {
        println!(
            "configuration ok: slot {} of {:?}, broker {:?}",
            settings.slot, ci.hosts, settings.broker
        );
        return ExitCode::SUCCESS;
    }
    // One thread: the relay's loop, the NATS client's connection and the
    // metrics endpoint hand work to each other on it instead of waking
    // other threads (into JetStream a fifth less CPU per event and more
    // events/s than with two workers). librdkafka and blocking calls
    // (spawn_blocking) have threads of their own.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            log::error!("cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        let broker = match settings.broker {
            config::BrokerKind::Nats => "nats",
            config::BrokerKind::Kafka => "kafka",
        };
        let metrics = metrics::Metrics::new(&settings.slot, broker);
        if let Some(addr) = settings.listen {
            match metrics::serve(addr, Arc::clone(&metrics)).await {
                Ok(bound) => {
                    log::info!("metrics on http://{bound}/metrics, health on http://{bound}/health")
                }
                Err(e) => {
                    log::error!("cannot listen on {addr}: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            log::info!("signal received: draining");
            let _ = stop_tx.send(true);
        });
        match relay::Relay::new(settings, ci, metrics, stop_rx)
            .run()
            .await
        {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                log::error!("{e}");
                ExitCode::from(2)
            }
        }
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
