//! `icicle counts rebuild`: the seed's step after the counting pipeline. It reads the
//! per-(principal, shard) counts the pipeline sent to its sinks (`[counting] sinks`: a Kafka
//! topic, or a file sink's directory), merges the shards, rebuilds the recursive directory
//! counts and writes the compact CSV the aggregate pipeline reads (`[aggregate] counts`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use icicle_core::config::LoadedConfig;
use icicle_runtime::snapshot::pipelines::{counts, write_csv};

/// `icicle counts ...`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: CountsCommand,
}

#[derive(clap::Subcommand, Debug)]
enum CountsCommand {
    /// Rebuild the counts CSV from what `[counting] sinks` received.
    Rebuild {
        /// The snapshot version whose counts to rebuild; default the last run that finished.
        #[arg(long)]
        version: Option<String>,
        /// Where the CSV goes; default `[counting] output`.
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// Print what was done as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

/// Run `icicle counts`.
pub fn main(cfg: &LoadedConfig, args: &Args) -> anyhow::Result<ExitCode> {
    let CountsCommand::Rebuild { version, out, json } = &args.command;
    if cfg.app.counting.sinks.is_empty() {
        bail!("counting.sinks is empty: the counting pipeline sends its counts nowhere to rebuild from");
    }
    let mut entries = Vec::new();
    for id in &cfg.app.counting.sinks {
        let ty = cfg.component_type("sinks", id)?;
        let read = match ty.as_str() {
            "file" => from_files(&cfg.figment.extract_inner::<PathBuf>(&format!("sinks.{id}.dir"))?),
            "kafka" => from_kafka(cfg, id),
            other => bail!("sinks.{id}: counts cannot be read back from a `{other}` sink (use `kafka` or `file`)"),
        };
        entries.extend(read.with_context(|| format!("reading the counts of sinks.{id}"))?);
    }
    let n = entries.len();
    let (version, rows) = counts::rebuild(entries, version.as_deref()).map_err(anyhow::Error::msg)?;
    let path = out.clone().unwrap_or_else(|| cfg.app.counting.output.clone());
    write_csv(&path, &rows).with_context(|| format!("writing {}", path.display()))?;
    let report = serde_json::json!({"version": version, "entries_read": n, "principals": rows.len(), "output": path});
    if *json {
        println!("{report}");
    } else {
        eprintln!(
            "counts of version {version}: {} principals from {n} entries read, written to {}",
            rows.len(),
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Every entry of the ingest documents under `dir` (a rank's directory too).
fn from_files(dir: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("ingest-")) {
                let text = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
                let mut doc: serde_json::Value =
                    serde_json::from_slice(&text).with_context(|| format!("{} is not JSON", p.display()))?;
                if let serde_json::Value::Array(gmeta) = doc["ingest_data"]["gmeta"].take() {
                    out.extend(gmeta);
                }
            }
        }
    }
    Ok(out)
}

/// Every entry the Kafka sink `id` sent to its topic (the whole topic, every partition).
#[cfg(feature = "kafka")]
fn from_kafka(cfg: &LoadedConfig, id: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let sink: icicle_plugins_kafka::sink::KafkaSinkConfig = cfg.figment.extract_inner(&format!("sinks.{id}"))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let messages = rt
        .block_on(icicle_plugins_kafka::produce::consume_all_with(&sink.connection, &sink.topic))
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("reading topic `{}`", sink.topic))?;
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        let Some(value) = m.value.filter(|_| m.op.as_deref() != Some("delete")) else { continue };
        let mut v: serde_json::Value = serde_json::from_str(&value)
            .with_context(|| format!("partition {} offset {} is not JSON", m.partition, m.offset))?;
        out.push(v["entry"].take());
    }
    Ok(out)
}

#[cfg(not(feature = "kafka"))]
fn from_kafka(_cfg: &LoadedConfig, id: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    bail!("sinks.{id}: reading a Kafka topic needs the `kafka` feature, and this icicle was built without it")
}
