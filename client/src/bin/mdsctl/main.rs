//! `mdsctl`: the mds client by hand. Paths are absolute and resolved by LOOKUP from the root,
//! name by name: a symbolic link is never followed, at the end of a path or inside one (`stat`,
//! `ln` and the rest act on the link itself; `readlink` prints where it points; `write` and
//! `cat` open the path itself, which the server refuses with ELOOP for a link). A file's data
//! goes through a handle, in pieces of at most `MAX_IO` bytes: `write` copies stdin into one,
//! `cat` prints one's bytes to stdout.
//!
//! Output is text for people, or with `-o json` one JSON document on stdout per run. Exit
//! status: 0 done; 1 the server (or the path check) answered with a POSIX error, whose name
//! (e.g. `ENOENT`) is printed on stderr, or `write` could not read stdin; 2 bad usage (clap's, including a value a flag cannot
//! take: a mode, a time, an attribute value, device numbers where they do not belong); 3 the
//! server could not be reached, did not answer within `--timeout`, closed the connection, or
//! sent something this client does not understand.
//!
//! This file holds the command line and the run; the commands are by family, each with its
//! own file: `names.rs` (the namespace), `xattrs.rs` (extended attributes), `data.rs` (a
//! file's bytes). `show.rs` and `values.rs` print and parse what they share, and
//! `failure.rs` turns a failure into its message and exit status.

// Nothing here needs `unsafe`; kept so. (What does — credentials from libc, socket
// options, signals — is in mds, the client library's credentials and the test kit.)
#![forbid(unsafe_code)]

mod data;
mod failure;
mod names;
mod show;
mod values;
mod xattrs;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use mds_client::auth::AuthKey;
use mds_client::tls::TlsClient;
use mds_client::units::parse_duration;
use mds_client::{ConnectOptions, Router};
use serde_json::json;

use data::DataCommand;
use failure::{EXIT_USAGE, Failure, at};
use names::{NameCommand, NodeType};
use show::{print_json, print_status, status_json};
use xattrs::XattrCommand;

#[derive(Parser)]
#[command(
    name = "mdsctl",
    version,
    about = "Talk to an mds server by hand",
    after_help = "Exit status: 0 done; 1 the server answered with an error (its POSIX name on \
                  stderr), or stdin could not be read; 2 bad usage; 3 the server could not be reached, did not answer \
                  within --timeout, or broke the protocol."
)]
struct Cli {
    /// Server address, HOST:PORT.
    #[arg(
        long,
        default_value = "127.0.0.1:7400",
        env = "MDS_SERVER",
        global = true
    )]
    server: String,
    /// Output format: `text` for people, `json` for programs (one JSON document on stdout).
    #[arg(short, long, value_enum, default_value_t = Output::Text, global = true)]
    output: Output,
    /// Give up after this long without the command having finished (e.g. 500ms, 30s; 0: wait
    /// forever). Exit status 3.
    #[arg(long, default_value = "30s", value_parser = parse_duration, global = true)]
    timeout: Duration,
    /// The shared key file, for a server started with --auth-key (the same file; only its
    /// owner may read it).
    #[arg(long, env = "MDS_AUTH_KEY", global = true)]
    auth_key: Option<PathBuf>,
    /// Speak TLS, trusting the certificates in this PEM file (the CA that signed the server's
    /// certificate, or that certificate itself).
    #[arg(long, env = "MDS_TLS_CA", global = true)]
    tls_ca: Option<PathBuf>,
    /// The name the server's certificate must carry. Default: the host part of --server.
    #[arg(long, env = "MDS_TLS_SERVER_NAME", global = true, requires = "tls_ca")]
    tls_server_name: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    // Each family of commands is an enum of its own, in its own file, flattened: the command
    // line is one level of subcommands, in this order.
    #[command(flatten)]
    Names(NameCommand),
    #[command(flatten)]
    Xattrs(XattrCommand),
    #[command(flatten)]
    Data(DataCommand),
    /// Wait until everything the server executed so far is durable.
    Sync,
    /// Print server figures (STATFS).
    Status,
}

/// What clap's attributes cannot say: device numbers are refused for a fifo or a socket.
fn check_usage(cli: &Cli) -> Result<(), clap::Error> {
    if let Command::Names(NameCommand::Mknod {
        node: NodeType::Fifo | NodeType::Socket,
        major: Some(_),
        ..
    }) = cli.command
    {
        let mut cmd = Cli::command();
        cmd.build();
        let mknod = cmd
            .find_subcommand_mut("mknod")
            .expect("mknod is a subcommand");
        return Err(mknod.error(
            ErrorKind::ArgumentConflict,
            "MAJOR and MINOR are for devices (c, u, b), not for a fifo (p) or a socket (s)",
        ));
    }
    Ok(())
}

/// TLS and the shared key, from the flags.
fn connect_options(cli: &Cli) -> Result<ConnectOptions, String> {
    let auth_key = match &cli.auth_key {
        Some(path) => Some(Arc::new(
            AuthKey::from_file(path).map_err(|e| format!("--auth-key: {e}"))?,
        )),
        None => None,
    };
    let tls = match &cli.tls_ca {
        Some(ca) => Some(Arc::new(
            TlsClient::from_ca_file(ca, cli.tls_server_name.as_deref())
                .map_err(|e| format!("--tls-ca: {e}"))?,
        )),
        None => None,
    };
    Ok(ConnectOptions { auth_key, tls })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = check_usage(&cli) {
        e.exit();
    }
    let options = match connect_options(&cli) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("mdsctl: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building a runtime");
    let (server, limit) = (cli.server.clone(), cli.timeout);
    let result = rt.block_on(async {
        if limit.is_zero() {
            run(cli, options).await
        } else {
            tokio::time::timeout(limit, run(cli, options))
                .await
                .unwrap_or(Err(Failure::Timeout))
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(&server, limit),
    }
}

async fn run(cli: Cli, options: ConnectOptions) -> Result<(), Failure> {
    let json = cli.output == Output::Json;
    // Any server of a cluster will do: each request goes to the shard of what it names.
    let client = Router::connect(&cli.server, &options)
        .await
        .map_err(at(format!("connect {}", cli.server)))?;
    execute(&client, cli.command, json, &cli.server).await?;
    // A server with early replies (`--ack early`) may have answered before the commit: say
    // so, as a client that goes away now would otherwise not know.
    let unsafe_changes = client.unsafe_count().await;
    if unsafe_changes > 0 {
        eprintln!(
            "mdsctl: {unsafe_changes} change(s) done but not committed yet (the server commits \
             them shortly; `mdsctl sync` waits for that)"
        );
    }
    Ok(())
}

/// One command, its output on stdout (text, or with `json` one document).
async fn execute(
    client: &Router,
    command: Command,
    json: bool,
    server: &str,
) -> Result<(), Failure> {
    match command {
        Command::Names(command) => names::execute(client, command, json).await,
        Command::Xattrs(command) => xattrs::execute(client, command, json).await,
        Command::Data(command) => data::execute(client, command, json).await,
        Command::Sync => sync(client, json).await,
        Command::Status => status(client, json, server).await,
    }
}

/// `sync`: returns once the server's commits cover everything it executed so far.
async fn sync(client: &Router, json: bool) -> Result<(), Failure> {
    client.sync().await.map_err(at("sync"))?;
    if json {
        print_json(&json!({ "last_committed": client.last_committed().await }));
    }
    Ok(())
}

/// `status`: the figures (STATFS) of the server named, which in a cluster are its own shard's
/// (commits, partitions, its part of the namespace), not the root's shard's.
async fn status(client: &Router, json: bool, server: &str) -> Result<(), Failure> {
    let s = match client.map().shard {
        Some(shard) => client.statfs_of(shard).await,
        None => client.statfs().await,
    }
    .map_err(at("status"))?;
    if json {
        print_json(&status_json(server, &s));
    } else {
        print_status(server, &s);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
