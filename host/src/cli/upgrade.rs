//! `stepstone upgrade`: moves a build's unfinished runs to a new build, page
//! by page, on the embedded store or a server, and prints what moved and
//! what diverged.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use reqwest::Method;
use serde_json::{Value, json};
use stepstone::runtime::Runtime;
use stepstone::store::{ComponentName, RunId, TenantId};

use super::read_file;
use super::remote::Remote;

#[derive(Args)]
pub struct UpgradeArgs {
    /// The build whose runs move: a component name (the build it points at now) or digest.
    #[arg(long)]
    from: ComponentName,
    /// The new build's `.wasm`; it is stored (without a name) first.
    #[arg(long)]
    to: PathBuf,
    /// Check every run against the new build, and move none.
    #[arg(long)]
    dry_run: bool,
}

/// Every page of the upgrade on the embedded store.
pub async fn local(runtime: &Runtime, args: UpgradeArgs) -> anyhow::Result<ExitCode> {
    let tenant = TenantId::default_tenant();
    let to = runtime.upload(&tenant, read_file(&args.to)?, None).await?;
    let from = runtime.catalog().component_digest(&tenant, &args.from).await?;
    let mut pages = Vec::new();
    let mut after: Option<RunId> = None;
    loop {
        let page = runtime
            .upgrades()
            .build(&tenant, &from, to.clone(), args.dry_run, after.as_ref())
            .await?;
        after = page.next_after.clone();
        pages.push(serde_json::to_value(page)?);
        if after.is_none() {
            return report(&pages);
        }
    }
}

/// Every page of the upgrade on a server.
pub async fn remote(remote: &Remote, args: UpgradeArgs) -> anyhow::Result<ExitCode> {
    let uploaded = remote.upload(read_file(&args.to)?.to_vec(), None).await?;
    let to = uploaded["digest"]
        .as_str()
        .context("the server stored the new build without a digest")?;
    let mut pages = Vec::new();
    let mut after = Value::Null;
    loop {
        let body = json!({"to": to, "dry_run": args.dry_run, "after": after});
        let path = format!("/v1/components/{}/upgrade", args.from);
        let page = remote.send(remote.request(Method::POST, &path).json(&body)).await?;
        after = page["next_after"].clone();
        pages.push(page);
        if after.is_null() {
            return report(&pages);
        }
    }
}

/// Prints the pages as one report; fails if any run diverged (it stays on
/// its build).
fn report(pages: &[Value]) -> anyhow::Result<ExitCode> {
    let all = |field: &str| -> Vec<Value> {
        pages
            .iter()
            .flat_map(|page| page[field].as_array().cloned().unwrap_or_default())
            .collect()
    };
    let (identical, diverged) = (all("identical"), all("diverged"));
    let first = pages.first().context("an upgrade answers at least one page")?;
    let summary = json!({
        "from": first["from"], "to": first["to"], "moved": first["moved"],
        "identical": identical, "diverged": diverged,
    });
    println!("{}", serde_json::to_string_pretty(&summary)?);
    Ok(if diverged.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
