//! mdsctl's commands on extended attributes, as setfattr(1) and getfattr(1) take and print
//! them: `setfattr` sets one or removes one, `getfattr` prints one or all.

use clap::Subcommand;
use mds_client::Router;
use mds_client::proto::{Errno, XattrSet};
use serde_json::{Value, json};

use crate::failure::{Failure, at};
use crate::show::print_json;
use crate::values::{XattrBytes, hex, parse_xattr_value, xattr_text};

/// The commands on extended attributes.
#[derive(Subcommand)]
pub(crate) enum XattrCommand {
    /// Set an extended attribute (-n NAME [-v VALUE]) or remove one (-x NAME), as setfattr(1).
    Setfattr {
        /// The attribute's name, with its namespace (user.comment).
        #[arg(
            short,
            long,
            required_unless_present = "remove",
            conflicts_with = "remove"
        )]
        name: Option<String>,
        /// The value (default: empty): text as given, `0x` and hex digits for bytes, or a
        /// string in double quotes where `\NNN` (octal), `\\` and `\"` are escapes.
        #[arg(short, long, value_parser = parse_xattr_value, requires = "name")]
        value: Option<XattrBytes>,
        /// Remove this attribute (ENODATA if there is none).
        #[arg(short = 'x', long, value_name = "NAME")]
        remove: Option<String>,
        /// Refuse with EEXIST if the attribute exists (XATTR_CREATE).
        #[arg(long, conflicts_with_all = ["replace", "remove"])]
        create: bool,
        /// Refuse with ENODATA if the attribute does not exist (XATTR_REPLACE).
        #[arg(long, conflicts_with = "remove")]
        replace: bool,
        path: String,
    },
    /// Print extended attributes, as getfattr(1): one with -n, else all of them.
    ///
    /// One NAME="VALUE" line each, a value that is not text as 0x and hex digits (what
    /// setfattr -v reads back). With -o json: {"path", "xattrs": [{"name", "value" (UTF-8,
    /// lossy), "value_hex"}]}.
    Getfattr {
        /// Only this attribute (ENODATA if there is none).
        #[arg(short, long, conflicts_with = "dump")]
        name: Option<String>,
        /// All attributes with their values (also what no -n means).
        #[arg(short, long)]
        dump: bool,
        path: String,
    },
}

/// One command on extended attributes, its output on stdout (text, or with `json` one
/// document).
pub(crate) async fn execute(
    client: &Router,
    command: XattrCommand,
    json: bool,
) -> Result<(), Failure> {
    match command {
        XattrCommand::Setfattr {
            remove: Some(name),
            path,
            ..
        } => removexattr(client, json, &path, &name).await,
        XattrCommand::Setfattr {
            name,
            value,
            create,
            replace,
            path,
            ..
        } => {
            let name = name.expect("clap: -n is required without -x");
            let value = value.map(|v| v.0).unwrap_or_default();
            let how = xattr_set(create, replace);
            setxattr(client, json, &path, &name, &value, how).await
        }
        XattrCommand::Getfattr { name, path, .. } => {
            getfattr(client, json, &path, name.as_deref()).await
        }
    }
}

/// `setfattr`'s flags (clap lets one at most through).
fn xattr_set(create: bool, replace: bool) -> XattrSet {
    match (create, replace) {
        (true, _) => XattrSet::Create,
        (false, true) => XattrSet::Replace,
        (false, false) => XattrSet::Either,
    }
}

async fn setxattr(
    client: &Router,
    json: bool,
    path: &str,
    name: &str,
    value: &[u8],
    how: XattrSet,
) -> Result<(), Failure> {
    let ino = client.resolve(path).await.map_err(at(path))?.ino;
    client
        .setxattr(ino, name, value, how)
        .await
        .map_err(at(format!("{path}: {name}")))?;
    if json {
        print_json(&json!({ "path": path, "name": name, "size": value.len() }));
    }
    Ok(())
}

async fn removexattr(client: &Router, json: bool, path: &str, name: &str) -> Result<(), Failure> {
    let ino = client.resolve(path).await.map_err(at(path))?.ino;
    client
        .removexattr(ino, name)
        .await
        .map_err(at(format!("{path}: {name}")))?;
    if json {
        print_json(&json!({ "path": path, "removed": name }));
    }
    Ok(())
}

/// `getfattr -n NAME`, or every attribute. Text: `NAME="VALUE"` lines; json: `{"path",
/// "xattrs": [{"name", "value" (lossy UTF-8), "value_hex"}]}` either way.
async fn getfattr(
    client: &Router,
    json: bool,
    path: &str,
    name: Option<&str>,
) -> Result<(), Failure> {
    let ino = client.resolve(path).await.map_err(at(path))?.ino;
    let mut found = Vec::new();
    if let Some(name) = name {
        let value = client
            .getxattr(ino, name)
            .await
            .map_err(at(format!("{path}: {name}")))?;
        found.push((name.to_owned(), value));
    } else {
        for name in client.listxattr(ino).await.map_err(at(path))? {
            match client.getxattr(ino, &name).await {
                Ok(value) => found.push((name, value)),
                // Removed since it was listed.
                Err(e) if e.errno() == Some(Errno::ENODATA) => {}
                Err(e) => return Err(Failure::Client(format!("{path}: {name}"), e)),
            }
        }
    }
    if json {
        let xattrs = found
            .iter()
            .map(|(name, value)| {
                json!({
                    "name": name,
                    "value": String::from_utf8_lossy(value),
                    "value_hex": hex(value),
                })
            })
            .collect();
        print_json(&json!({ "path": path, "xattrs": Value::Array(xattrs) }));
    } else {
        for (name, value) in &found {
            println!("{name}={}", xattr_text(value));
        }
    }
    Ok(())
}
