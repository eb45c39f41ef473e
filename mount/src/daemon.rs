//! Background mode. `mdsmount` without `-f` starts itself again as a child in a process group
//! of its own (so a terminal's Ctrl-C or hangup does not reach it), with stdin from /dev/null
//! and stderr where the log goes, and waits for the child to say on its stdout that the mount
//! is up: then it exits 0, so a shell prompt (or `mount -a`) comes back once the file system
//! answers; if the child fails first, its message is printed and the exit status is 1.
//! Starting a fresh process rather than forking keeps the child free of the parent's state
//! (fork with threads running is unsafe; the child starts its runtime itself).

use std::fs::OpenOptions;
use std::io::{BufRead as _, BufReader, IsTerminal as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, ExitCode, Stdio};

use crate::options::Settings;

/// What the child writes on its stdout once the mount is up.
const READY: &str = "ready";

/// Starts the background child and waits until it has mounted or failed.
pub fn start(settings: &Settings) -> ExitCode {
    match run_child(settings) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mdsmount: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_child(settings: &Settings) -> Result<ExitCode, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding myself: {e}"))?;
    let log = match &settings.log_file {
        Some(path) => Stdio::from(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("log file {}: {e}", path.display()))?,
        ),
        // A daemon does not write on the terminal it was started from.
        None if std::io::stderr().is_terminal() => Stdio::null(),
        None => Stdio::inherit(),
    };
    let mut child = Command::new(exe)
        // First, so that a `--` among the user's arguments cannot make it a positional.
        .arg("--daemon-child")
        .args(std::env::args_os().skip(1))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("starting the background process: {e}"))?;
    let stdout = child.stdout.take().expect("piped");
    let mut line = String::new();
    let read = BufReader::new(stdout).read_line(&mut line);
    match (read, line.trim_end()) {
        (Ok(_), READY) => Ok(ExitCode::SUCCESS),
        (Ok(_), message) if !message.is_empty() => {
            eprintln!("{message}");
            let _ = child.wait();
            Ok(ExitCode::FAILURE)
        }
        _ => {
            let status = child.wait().map_err(|e| e.to_string())?;
            Err(format!(
                "the background process ended ({status}) before the mount was up{}",
                settings
                    .log_file
                    .as_ref()
                    .map(|p| format!("; see {}", p.display()))
                    .unwrap_or_default()
            ))
        }
    }
}

/// How the mount tells whoever started it that it is up, or why it is not.
pub enum Ready {
    /// In the foreground: nobody waits.
    Foreground,
    /// The background child: the parent waits on our stdout.
    Child,
}

impl Ready {
    pub fn up(&self) {
        if matches!(self, Ready::Child) {
            // The parent exits after this line; nothing is written to stdout again.
            let mut out = std::io::stdout();
            let _ = writeln!(out, "{READY}");
            let _ = out.flush();
        }
    }

    pub fn failed(&self, why: &anyhow::Error) {
        match self {
            Ready::Foreground => eprintln!("mdsmount: {why:#}"),
            Ready::Child => {
                tracing::error!("{why:#}");
                let mut out = std::io::stdout();
                let _ = writeln!(out, "mdsmount: {why:#}");
                let _ = out.flush();
            }
        }
    }
}
