//! `wardend [--socket PATH] [--state-dir DIR] [--dns IP:PORT] [--audit-max-bytes N] [--audit-keep N] [--max-sessions N] [--dangerously-run-servers-as-root]`
//!
//! The sandbox init role is checked before anything else: namespaces must be
//! entered by a single-threaded process, so it runs before any runtime exists.
//! Then a socket passed by a service manager (socket activation,
//! `wardend::activation`) is taken, before anything else opens a descriptor
//! or starts a thread; without one, `wardend` binds its own socket.
#![forbid(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Parser;
use nix::fcntl::{Flock, FlockArg};

#[derive(Parser, Debug)]
#[command(
    name = "wardend",
    version,
    about = "The Warden daemon: runs MCP servers in a deny-by-default sandbox"
)]
struct Args {
    /// Control socket (default: $WARDEN_SOCKET, else $XDG_RUNTIME_DIR/warden/wardend.sock,
    /// else a private directory under the temp dir).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// State directory holding the audit store (default: $XDG_STATE_HOME/warden).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Resolve the names sandboxed servers connect to with this DNS server
    /// (IP:PORT, plain DNS over UDP) instead of the system resolver.
    #[arg(long, value_name = "IP:PORT")]
    dns: Option<std::net::SocketAddr>,
    /// Rotate the live audit file before it would exceed N bytes.
    #[arg(long, value_name = "N", default_value_t = warden_audit::writer::DEFAULT_MAX_BYTES,
          value_parser = clap::value_parser!(u64).range(4096..))]
    audit_max_bytes: u64,
    /// Keep N rotated audit files; older ones are deleted (0: only the live file).
    #[arg(long, value_name = "N", default_value_t = warden_audit::writer::DEFAULT_KEEP)]
    audit_keep: usize,
    /// Refuse new sessions beyond N at once (default: as many as the file
    /// descriptor limit allows, keeping a reserve for the audit store).
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_sessions: usize,
    /// When wardend runs as root, start sessions anyway: the servers then run
    /// as the host's root user (without capabilities, but owning every
    /// root-owned file they can see). Without it a root daemon refuses every
    /// session. Also WARDEN_DANGEROUSLY_RUN_SERVERS_AS_ROOT=1.
    #[arg(long)]
    dangerously_run_servers_as_root: bool,
    /// Do not follow sessions' MCP streams: no `mcp` records. For measuring
    /// what following costs (`warden-bench mcp`), or as a last resort.
    #[arg(long)]
    no_mcp_records: bool,
    /// Print what the kernel offers (the `features` of `wardenctl status`)
    /// as JSON and exit, without starting a daemon.
    #[arg(long)]
    features: bool,
}

fn main() -> ExitCode {
    // The native sandbox's init role (Linux): the daemon re-executes itself.
    #[cfg(target_os = "linux")]
    warden_sandbox::init_entry_if_requested();
    let activation = wardend::activation::take(|k| std::env::var(k).ok());
    forget_activation_vars();
    let args = Args::parse();
    init_tracing();
    match real_main(args, activation) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wardend: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Removes `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES` once read, as
/// `sd_listen_fds(3)` does, so that nothing this process starts inherits
/// them. The one change of the environment in Warden (docs/dev.md): here,
/// in `main`, while the process has a single thread and no runtime, which
/// is when it is sound.
#[allow(clippy::disallowed_methods)]
fn forget_activation_vars() {
    for var in wardend::activation::VARS {
        std::env::remove_var(var);
    }
}

fn init_tracing() {
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_from_env("WARDEN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Under systemd (JOURNAL_STREAM set) log to journald when it answers.
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        if let Ok(j) = tracing_journald::layer() {
            tracing_subscriber::registry().with(filter).with(j).init();
            return;
        }
    }
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .init();
}

/// Takes the single-instance lock next to the socket, holding it for the
/// daemon's life. The lock file is opened with `O_NOFOLLOW`: a symlink
/// planted there (by whoever can write the directory) must not make the
/// daemon truncate another file (F16).
fn lock_instance(socket: &Path) -> anyhow::Result<Flock<File>> {
    let lock_path = PathBuf::from(format!("{}.lock", socket.display()));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&lock_path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => anyhow::anyhow!(
                "{} is a symlink; refusing to follow it (remove it if it is not yours)",
                lock_path.display()
            ),
            _ => anyhow::Error::new(e),
        })
        .with_context(|| format!("cannot open lock file {}", lock_path.display()))?;
    if !file.metadata()?.is_file() {
        bail!("lock file {} is not a regular file", lock_path.display());
    }
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            lock.set_len(0).ok();
            let _ = writeln!(lock, "{}", std::process::id());
            Ok(lock)
        }
        Err((_, errno)) if errno == nix::errno::Errno::EWOULDBLOCK => {
            let pid = fs::read_to_string(&lock_path).unwrap_or_default();
            bail!(
                "another wardend is already running for socket {} (pid {})",
                socket.display(),
                pid.trim()
            )
        }
        Err((_, errno)) => bail!("cannot lock {}: {errno}", lock_path.display()),
    }
}

fn bind(socket: &Path) -> anyhow::Result<std::os::unix::net::UnixListener> {
    let parent = socket
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        bail!("socket directory {} does not exist", parent.display());
    }
    match fs::symlink_metadata(socket) {
        Ok(_) => {
            // We hold the instance lock, so a socket file left here is stale
            // if it is ours; anyone else's is refused.
            warden_core::paths::verify_socket(socket).with_context(|| {
                format!("refusing to replace existing socket {}", socket.display())
            })?;
            fs::remove_file(socket)
                .with_context(|| format!("cannot remove stale socket {}", socket.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", socket.display())),
    }
    // Created with no group/other access from the first instant.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let listener = std::os::unix::net::UnixListener::bind(socket);
    nix::sys::stat::umask(old);
    let listener = listener.with_context(|| format!("cannot bind {}", socket.display()))?;
    fs::set_permissions(socket, fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit: every session holds
/// descriptors in the daemon (stdio pipes, the proxy's tunnels, the notifier),
/// and the usual soft limit of 1024 lets a few sessions starve the others and
/// the control socket (F10).
fn raise_nofile() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::info!(from = soft, to = hard, "raised the soft RLIMIT_NOFILE"),
            Err(e) => tracing::warn!(soft, hard, error = %e, "cannot raise RLIMIT_NOFILE"),
        },
        Ok((soft, _)) => tracing::info!(limit = soft, "RLIMIT_NOFILE is already at the hard limit"),
        Err(e) => tracing::warn!(error = %e, "cannot read RLIMIT_NOFILE"),
    }
}

/// The socket's directory must be private to this user (F16): in a shared
/// directory another user could plant the lock file or squat the name.
fn verify_socket_dir(socket: &Path) -> anyhow::Result<()> {
    let parent = socket
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("/"));
    warden_core::paths::verify_private(parent, 0o700, true).with_context(|| {
        format!(
            "the socket's directory {} must be private to you (owned by you, mode 0700)",
            parent.display()
        )
    })?;
    Ok(())
}

/// The socket a service manager passed, checked as `wardend` checks its own:
/// `--socket` or `$WARDEN_SOCKET` must name the same file, its directory must
/// be private, the socket owned by this user with mode 0600 (what
/// `SocketMode=0600` and `DirectoryMode=0700` in `wardend.socket` make).
fn activated_socket(
    activated: wardend::activation::Activated,
    args: &Args,
) -> anyhow::Result<(PathBuf, std::os::unix::net::UnixListener)> {
    let env_socket = std::env::var_os("WARDEN_SOCKET")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from);
    let explicit = match (&args.socket, &env_socket) {
        (Some(p), _) => Some((p.as_path(), "--socket")),
        (None, Some(p)) => Some((p.as_path(), "$WARDEN_SOCKET")),
        (None, None) => None,
    };
    let cwd = std::env::current_dir()?;
    wardend::activation::reconcile(&activated.path, explicit, &cwd)?;
    let socket = cwd.join(&activated.path);
    verify_socket_dir(&socket)?;
    warden_core::paths::verify_socket(&socket).with_context(|| {
        format!(
            "the socket passed by the service manager ({}) must be yours with mode 0600 \
             (SocketMode=0600)",
            socket.display()
        )
    })?;
    Ok((socket, activated.listener))
}

fn real_main(
    args: Args,
    activation: Result<wardend::activation::Found, wardend::activation::ActivationError>,
) -> anyhow::Result<()> {
    use wardend::activation::Found;
    if args.features {
        let rows: Vec<serde_json::Value> = wardend::features::report_now()
            .into_iter()
            .map(|f| serde_json::json!({"name": f.name, "available": f.available, "detail": f.detail}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    raise_nofile();
    let activated = match activation? {
        Found::Activated(a) => Some(a),
        Found::None => None,
        Found::NotOurs { listen_pid } => {
            tracing::info!(
                listen_pid = listen_pid.as_deref().unwrap_or("unset"),
                pid = std::process::id(),
                "LISTEN_FDS is set for another process: not socket-activated"
            );
            None
        }
    };
    let (socket, activated) = match activated {
        Some(a) => {
            let (socket, listener) = activated_socket(a, &args)?;
            (socket, Some(listener))
        }
        None => {
            // An explicit socket (--socket, $WARDEN_SOCKET) must sit in a
            // private directory, like the default one.
            let explicit = args.socket.is_some()
                || std::env::var_os("WARDEN_SOCKET").is_some_and(|s| !s.is_empty());
            let socket = warden_core::paths::socket_path(args.socket.as_deref())?;
            let socket = if socket.is_absolute() {
                socket
            } else {
                std::env::current_dir()?.join(socket)
            };
            if explicit {
                verify_socket_dir(&socket)?;
            }
            (socket, None)
        }
    };
    let state_dir = match args.state_dir {
        Some(d) => d,
        None => warden_core::paths::default_state_dir()?,
    };
    warden_core::paths::ensure_private_dir(&state_dir)
        .with_context(|| format!("state directory {}", state_dir.display()))?;
    if std::env::var_os("WARDEN_AUTOSTARTED").is_some() {
        // Started by a shim: leave its session and process group so its
        // terminal's signals do not reach the daemon.
        let _ = nix::unistd::setsid();
    }
    // Blocking-pool threads serve only passing work (a sandbox's start, a
    // batch of audit records, an exit): let them go soon after a burst of
    // session starts instead of after tokio's default 10 s.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_keep_alive(std::time::Duration::from_secs(2))
        .build()?;
    // Handlers are installed before the socket exists: a SIGTERM at any moment
    // after that shuts down cleanly (sessions ended, socket removed).
    let (mut term, mut int) = {
        use tokio::signal::unix::{signal, SignalKind};
        let _guard = rt.enter();
        (
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        )
    };
    let _lock = lock_instance(&socket)?;
    // An activated socket is the service manager's: never replaced here (it
    // stays in place while we hold the lock) and never removed at the end.
    let owned = activated.is_none();
    let listener = match activated {
        Some(l) => {
            l.set_nonblocking(true)?;
            tracing::info!(socket = %socket.display(), "serving the socket passed by the service manager (socket activation)");
            l
        }
        None => bind(&socket)?,
    };
    let config = wardend::Config {
        socket: socket.clone(),
        state_dir,
        sandbox_exe: PathBuf::from("/proc/self/exe"),
        dns: args.dns,
        audit: warden_audit::Options {
            max_bytes: args.audit_max_bytes,
            keep: args.audit_keep,
            ..warden_audit::Options::default()
        },
        max_sessions: args.max_sessions,
        mcp_records: !args.no_mcp_records,
        servers_as_root: args.dangerously_run_servers_as_root
            || std::env::var_os(wardend::ROOT_SERVERS_ENV).is_some_and(|v| v == "1"),
    };
    if warden_core::paths::current_uid() == 0 {
        if config.servers_as_root {
            tracing::warn!("wardend runs as root and --dangerously-run-servers-as-root is set: servers run as the host's root user (without capabilities)");
        } else {
            tracing::warn!("wardend runs as root: every session will be refused (servers would be the host's root user); run wardend as an unprivileged user");
        }
    }
    let result = rt.block_on(async move {
        let listener = tokio::net::UnixListener::from_std(listener)?;
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
        };
        wardend::run(listener, config, shutdown, || {
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
        })
        .await
    });
    if owned {
        let _ = fs::remove_file(&socket);
    }
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}
