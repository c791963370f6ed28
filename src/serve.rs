//! `icicle serve`: the Globus Search API over an index directory, on HTTP (127.0.0.1 by
//! default; callers identified by bearer tokens) and on a Unix socket (callers identified by
//! their credentials). It owns the index's writer: producers publish through it with the
//! `globus` sink (`base_url` its address, a writer token).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use icicle_plugins_index::api::auth::{PeerPolicy, Tokens};
use icicle_plugins_index::api::http::accept_loop;
use icicle_plugins_index::api::{Origin, ServeConfig, Service};

/// `icicle serve --index DIR [--listen ADDR] [--socket PATH] [--tokens FILE] [--index-id UUID]`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The index directory (created when missing); `icicle serve` holds its writer.
    #[arg(long)]
    index: PathBuf,
    /// HTTP address (default 127.0.0.1:8900; port 0 picks a free one). With only `--socket`,
    /// no HTTP.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// A Unix socket too (mode 0666: each peer is answered for its own uid and groups).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Bearer tokens: `TOKEN<TAB>identity-urn[<TAB>group-urn,...[<TAB>writer]]` a line; the file
    /// must not be readable by its group or others. Without it, HTTP answers `public` records only.
    #[arg(long, value_name = "FILE")]
    tokens: Option<PathBuf>,
    /// The index id clients name (default: the one kept in the index directory).
    #[arg(long, value_name = "UUID")]
    index_id: Option<String>,
    /// Indexing buffer, MiB.
    #[arg(long, default_value_t = 128, value_name = "MIB")]
    memory_mb: usize,
}

/// A Unix socket at `path`: a stale one (nobody listening) is replaced; a live one is refused.
fn bind_socket(path: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            bail!("--socket {}: exists and is not a socket", path.display());
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!("--socket {}: another server listens there", path.display());
        }
        std::fs::remove_file(path)
            .with_context(|| format!("--socket {}: removing the stale socket", path.display()))?;
    }
    let l = tokio::net::UnixListener::bind(path).with_context(|| format!("--socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("--socket {}", path.display()))?;
    Ok(l)
}

/// How socket peers become principals: the configuration's `records.principals` and
/// `records.everyone`.
fn peer_policy(cfg: &icicle_core::config::LoadedConfig) -> anyhow::Result<PeerPolicy> {
    let map = match &cfg.app.records.principals {
        Some(f) => {
            Some(icicle_core::policy::PrincipalMap::load(f).map_err(|e| anyhow::anyhow!("records.principals: {e}"))?)
        }
        None => None,
    };
    Ok(PeerPolicy { map, everyone: cfg.app.records.everyone.clone().into_iter().collect() })
}

/// `icicle serve`: until SIGTERM or SIGINT, then after the requests in progress.
pub fn serve(cfg: &icicle_core::config::LoadedConfig, args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let tokens = match &args.tokens {
        Some(f) => Tokens::load(f)?,
        None => Tokens::default(),
    };
    if args.memory_mb < 15 {
        bail!("--memory-mb: at least 15");
    }
    let listen = match (&args.listen, &args.socket) {
        (Some(l), _) => Some(l.clone()),
        (None, Some(_)) => None,
        (None, None) => Some("127.0.0.1:8900".to_string()),
    };
    let svc = Service::open(ServeConfig {
        dir: args.index.clone(),
        index_id: args.index_id.clone(),
        tokens,
        peers: peer_policy(cfg)?,
        memory_bytes: args.memory_mb << 20,
    })?;
    let svc = Arc::new(svc);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    rt.block_on(async {
        let mut loops = tokio::task::JoinSet::new();
        if let Some(addr) = &listen {
            let l = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("--listen {addr}"))?;
            let bound = l.local_addr()?;
            if !bound.ip().is_loopback() {
                tracing::warn!(%bound, "icicle serve listens beyond this machine: requests without a token see the `public` records");
            }
            eprintln!("icicle serve: index {} at http://{bound}", svc.index_id());
            let l = Arc::new(l);
            let accept = move || {
                let l = l.clone();
                async move { l.accept().await.map(|(s, _)| (s, Origin::Tcp)) }
            };
            let (svc, stop) = (svc.clone(), stop.clone());
            loops.spawn(async move { accept_loop("http", accept, svc, stop).await });
        }
        if let Some(path) = &args.socket {
            let l = bind_socket(path)?;
            // Where an `index` sink on this directory finds serve, to publish through it.
            let named = std::path::absolute(path).unwrap_or_else(|_| path.clone());
            let file = args.index.join(icicle_plugins_index::served::SERVE_SOCKET_FILE);
            icicle_core::durable::write_atomic(&file, format!("{}\n", named.display()).as_bytes())
                .with_context(|| format!("writing {}", file.display()))?;
            eprintln!("icicle serve: index {} at unix:{}", svc.index_id(), path.display());
            let l = Arc::new(l);
            let accept = move || {
                let l = l.clone();
                async move {
                    let (s, _) = l.accept().await?;
                    let cred = s.peer_cred()?;
                    Ok((s, Origin::Peer { uid: cred.uid(), gid: cred.gid() }))
                }
            };
            let (svc, stop) = (svc.clone(), stop.clone());
            loops.spawn(async move { accept_loop("socket", accept, svc, stop).await });
        }
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        icicle_core::service::ready(&format!("serving index {}", svc.index_id()));
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        icicle_core::service::stopping("stopping after the requests in progress");
        eprintln!("icicle serve: stopping after the requests in progress");
        let _ = stop_tx.send(true);
        while loops.join_next().await.is_some() {}
        anyhow::Ok(())
    })?;
    if let Some(path) = &args.socket {
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(args.index.join(icicle_plugins_index::served::SERVE_SOCKET_FILE));
    }
    // The last reference: the writer is released (and its merges finished) here.
    drop(svc);
    Ok(ExitCode::SUCCESS)
}
