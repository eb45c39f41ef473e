//! How an mdsctl run fails ([`Failure`]), and the message on stderr and the exit status each
//! failure ends the run with: 1 the server's error, 2 bad usage, 3 no server to speak to.

use std::process::ExitCode;
use std::time::Duration;

use mds_client::ClientError;
use mds_client::proto::Errno;

/// The server answered with an error (or a path was refused before it was sent).
const EXIT_SERVER_ERROR: u8 = 1;
/// Could not reach the server, no answer in time, connection lost, or a protocol failure.
const EXIT_UNREACHABLE: u8 = 3;
/// Bad usage: clap's own, or a key or CA file that cannot be used.
pub(crate) const EXIT_USAGE: u8 = 2;

pub(crate) enum Failure {
    /// What was being done, and how it failed.
    Client(String, ClientError),
    /// `write` could not read its input.
    Stdin(std::io::Error),
    /// `--timeout` passed first.
    Timeout,
}

/// A call's error as the failure of `what` was being done.
pub(crate) fn at(what: impl Into<String>) -> impl FnOnce(ClientError) -> Failure {
    let what = what.into();
    move |e| Failure::Client(what, e)
}

impl Failure {
    /// Says on stderr why the run against `server` failed (`limit`: its `--timeout`), and
    /// returns the exit status that says how.
    pub(crate) fn report(self, server: &str, limit: Duration) -> ExitCode {
        match self {
            Failure::Timeout => {
                eprintln!(
                    "mdsctl: {server}: no answer within {} (--timeout)",
                    humantime::format_duration(limit)
                );
                ExitCode::from(EXIT_UNREACHABLE)
            }
            Failure::Stdin(e) => {
                eprintln!("mdsctl: reading stdin: {e}");
                ExitCode::from(EXIT_SERVER_ERROR)
            }
            Failure::Client(what, e) => match e.errno() {
                // Refused at CONNECT: the name, and what to do about it.
                Some(Errno::EAUTH) => {
                    eprintln!("mdsctl: {what}: EAUTH: the server refused this key (--auth-key)");
                    ExitCode::from(EXIT_SERVER_ERROR)
                }
                None if matches!(e, ClientError::AuthRequired) => {
                    eprintln!("mdsctl: {what}: EAUTH: {e}");
                    ExitCode::from(EXIT_SERVER_ERROR)
                }
                Some(errno) => {
                    eprintln!("mdsctl: {what}: {errno}");
                    ExitCode::from(EXIT_SERVER_ERROR)
                }
                None => {
                    eprintln!("mdsctl: {what}: {e}");
                    ExitCode::from(EXIT_UNREACHABLE)
                }
            },
        }
    }
}
