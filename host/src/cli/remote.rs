//! The CLI as a client of `stepstone serve`: the same subcommands, spoken
//! over the HTTP API with a tenant's token.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{Value, json};

use super::drive::RunLifecycle;
use super::{Command, SecretCommand, SecretScope, read_file, secret_from_stdin};

/// How long one read of a stream may take: longer than any server's read
/// span, past which the CLI reads on.
const STREAM_READ_FOR: Duration = Duration::from_secs(3600);

/// One server-sent event: what it is, its id, and its data (its `data`
/// lines joined).
pub(super) struct ServerEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

/// Hands each server-sent event of `response` to `each` as it comes, until
/// the response ends or `each` answers `false`.
pub(super) async fn each_event(
    mut response: reqwest::Response,
    mut each: impl FnMut(ServerEvent) -> bool,
) -> anyhow::Result<()> {
    let mut pending = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.windows(2).position(|two| two == b"\n\n") {
            let block: Vec<u8> = pending.drain(..end + 2).collect();
            if !each(server_event(&String::from_utf8_lossy(&block))) {
                return Ok(());
            }
        }
    }
    Ok(())
}

fn server_event(block: &str) -> ServerEvent {
    let mut event = ServerEvent {
        event: "message".into(),
        id: None,
        data: String::new(),
    };
    let mut data = Vec::new();
    for line in block.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event.event = value.to_owned(),
            "id" => event.id = Some(value.to_owned()),
            "data" => data.push(value),
            _ => {}
        }
    }
    event.data = data.join("\n");
    event
}

/// Runs `command` against the server.
pub async fn execute(remote: Remote, command: Command) -> anyhow::Result<ExitCode> {
    let print = super::print_json;
    match command {
        Command::Upload { component, name } => {
            print(&remote.upload(read_file(&component)?.to_vec(), name.as_deref()).await?)
        }
        Command::Start {
            component,
            workflow,
            input,
            run_id,
            when,
        } => {
            println!(
                "{}",
                remote
                    .start(
                        &component,
                        &workflow,
                        &input,
                        run_id.as_ref().map(|r| r.as_str()),
                        &when
                    )
                    .await?
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { run, .. } => print(&remote.status(run.as_str()).await?),
        Command::Wait { run, timeout } => {
            let status = remote.wait(run.as_str(), timeout).await?;
            println!("{}", serde_json::to_string_pretty(&status)?);
            Ok(super::inspect::exit_code(status["state"].as_str().unwrap_or_default()))
        }
        Command::History { run, .. } => print(&remote.history(run.as_str()).await?),
        Command::Payload { run, sha256 } => {
            let payload = remote
                .send(remote.request(Method::GET, &format!("/v1/runs/{run}/payloads/{sha256}")))
                .await?;
            print(&payload)
        }
        Command::Stream {
            run,
            name,
            offset,
            follow,
        } => remote.print_stream(run.as_str(), name.as_str(), offset, follow).await,
        Command::Signal { run, name, payload, id } => remote
            .signal(run.as_str(), &name, &payload, id.as_ref().map(|id| id.as_str()))
            .await
            .map(|()| ExitCode::SUCCESS),
        Command::Cancel { run, reason } => remote.cancel(run.as_str(), &reason).await.map(|()| ExitCode::SUCCESS),
        Command::Pause { run, reason, interrupt } => remote
            .pause(run.as_str(), Some((&reason, interrupt)))
            .await
            .map(|()| ExitCode::SUCCESS),
        Command::Resume { run: Some(run), .. } => remote.pause(run.as_str(), None).await.map(|()| ExitCode::SUCCESS),
        Command::Advance { run } => {
            let advanced = remote
                .send(remote.request(Method::POST, &format!("/v1/runs/{run}/advance")))
                .await?;
            print(&advanced)
        }
        Command::Restart {
            run,
            seq,
            component,
            run_id,
            keep_old,
        } => {
            let request = json!({"seq": seq, "component": component, "run_id": run_id, "keep_old": keep_old});
            let restarted = remote
                .send(
                    remote
                        .request(Method::POST, &format!("/v1/runs/{run}/restart"))
                        .json(&request),
                )
                .await?;
            print(&restarted)
        }
        Command::Replay { run, component: None } => {
            let report = remote.replay(run.as_str()).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(if report["verdict"] == "diverged" {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Replay { component: Some(_), .. } => {
            anyhow::bail!("replay --component works on the embedded store only; drop --server")
        }
        Command::Secret(command) => remote.secret(command).await.map(|()| ExitCode::SUCCESS),
        Command::Upgrade(args) => super::upgrade::remote(&remote, args).await,
        Command::Versions { name } => {
            let described = remote
                .send(remote.request(Method::GET, &format!("/v1/components/{name}")))
                .await?;
            print(&described["versions"])
        }
        Command::DeleteComponent { digest } => {
            let request = remote.request(Method::DELETE, &format!("/v1/components/{digest}"));
            remote.send(request).await?;
            eprintln!("component {digest} deleted");
            Ok(ExitCode::SUCCESS)
        }
        Command::Schedule(command) => super::schedule::remote(&remote, command).await,
        Command::Batch(command) => super::batch::remote(&remote, command).await,
        Command::Hook(command) => super::hook::remote(&remote, command).await,
        // It writes files here and asks the server nothing.
        Command::New(args) => super::scaffold::create(&args),
        Command::Group(command) => super::group::remote(&remote, command).await,
        Command::Run(_)
        | Command::Resume { .. }
        | Command::List { .. }
        | Command::Serve { .. }
        | Command::Tenant(_)
        | Command::Store(_)
        | Command::Componentize { .. }
        | Command::SignalSchemas { .. }
        | Command::Test(_) => {
            anyhow::bail!("this command works on the embedded store only; drop --server")
        }
    }
}

/// A server and the token the CLI calls it with.
pub struct Remote {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Remote {
    pub fn new(server: &str, token: Option<String>) -> anyhow::Result<Self> {
        let token = token.context("--server needs a tenant token: pass --token or set STEPSTONE_TOKEN")?;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(120)).build()?;
        Ok(Self {
            base: server.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    pub(super) fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    /// Sends a request; an error status becomes an error carrying the
    /// server's message.
    pub(super) async fn send(&self, request: RequestBuilder) -> anyhow::Result<Value> {
        let text = self.stream(request).await?.text().await?;
        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// Prints the values of a run's stream from `offset` on, one a line;
    /// with `follow`, reads on across the server's read span (from the
    /// offset after the last value, as an `EventSource` does) until the
    /// run's end.
    async fn print_stream(&self, run: &str, name: &str, offset: u64, follow: bool) -> anyhow::Result<ExitCode> {
        let mut next = offset;
        let mut ended = false;
        while !ended {
            let request = self
                .request(Method::GET, &format!("/v1/runs/{run}/streams/{name}"))
                .query(&[("offset", next.to_string()), ("follow", follow.to_string())]);
            let response = self.stream(request.timeout(STREAM_READ_FOR)).await?;
            each_event(response, |event| {
                match event.event.as_str() {
                    "value" => {
                        println!("{}", event.data);
                        next = event.id.and_then(|id| id.parse::<u64>().ok()).map_or(next, |id| id + 1);
                    }
                    "end" => ended = true,
                    "error" => eprintln!("the server could not read on: {}", event.data),
                    _ => {}
                }
                !ended
            })
            .await?;
            ended |= !follow;
        }
        Ok(ExitCode::SUCCESS)
    }

    /// Sends a request and returns the answer, to read as it comes; an
    /// error status becomes an error carrying the server's message.
    pub(super) async fn stream(&self, request: RequestBuilder) -> anyhow::Result<reqwest::Response> {
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.base))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let text = response.text().await?;
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        let message = body["error"].as_str().map_or_else(|| body.to_string(), str::to_owned);
        match status {
            StatusCode::UNAUTHORIZED => anyhow::bail!("the server refused the token: {message}"),
            _ => anyhow::bail!("{message} (HTTP {})", status.as_u16()),
        }
    }

    pub async fn upload(&self, bytes: Vec<u8>, name: Option<&str>) -> anyhow::Result<Value> {
        let request = self.request(Method::POST, "/v1/components").body(bytes);
        let request = match name {
            Some(name) => request.query(&[("name", name)]),
            None => request,
        };
        self.send(request).await
    }

    pub async fn start(
        &self,
        component: &str,
        workflow: &str,
        input: &str,
        run_id: Option<&str>,
        when: &RunLifecycle,
    ) -> anyhow::Result<String> {
        let input: Value = serde_json::from_str(input).context("the input is not valid JSON")?;
        let (component, version) = super::drive::versioned(component)?;
        let body = json!({
            "component": component, "version": version, "workflow": workflow, "input": input, "run_id": run_id,
            "start_at": when.start_at, "delay": when.delay, "deadline": when.deadline, "timeout": when.timeout,
            "notify": when.notify, "tags": when.tags, "priority": when.priority,
            "concurrency_key": when.concurrency_key, "concurrency_limit": when.concurrency_limit,
        });
        let started = self.send(self.request(Method::POST, "/v1/runs").json(&body)).await?;
        started["run_id"]
            .as_str()
            .map(str::to_owned)
            .context("the server answered without a run id")
    }

    pub async fn status(&self, run: &str) -> anyhow::Result<Value> {
        self.send(self.request(Method::GET, &format!("/v1/runs/{run}"))).await
    }

    pub async fn wait(&self, run: &str, timeout: Duration) -> anyhow::Result<Value> {
        let timeout = humantime::format_duration(timeout).to_string();
        let request = self
            .request(Method::GET, &format!("/v1/runs/{run}/wait"))
            .query(&[("timeout", timeout)]);
        self.send(request).await
    }

    pub async fn history(&self, run: &str) -> anyhow::Result<Value> {
        self.send(self.request(Method::GET, &format!("/v1/runs/{run}/journal")))
            .await
    }

    pub async fn signal(&self, run: &str, name: &str, payload: &str, id: Option<&str>) -> anyhow::Result<()> {
        let request = self.request(Method::POST, &format!("/v1/runs/{run}/signals/{name}"));
        let request = match id {
            Some(id) => request.query(&[("signal_id", id)]),
            None => request,
        };
        self.send(
            request
                .header("content-type", "application/json")
                .body(payload.to_owned()),
        )
        .await
        .map(drop)
    }

    pub async fn cancel(&self, run: &str, reason: &str) -> anyhow::Result<()> {
        let request = self
            .request(Method::POST, &format!("/v1/runs/{run}/cancel"))
            .json(&json!({"reason": reason}));
        self.send(request).await.map(drop)
    }

    /// Pauses the run, given a reason and whether to interrupt its
    /// attempt under way; resumes it, given none.
    pub async fn pause(&self, run: &str, pause: Option<(&str, bool)>) -> anyhow::Result<()> {
        let request = match pause {
            Some((reason, interrupt)) => self
                .request(Method::POST, &format!("/v1/runs/{run}/pause"))
                .json(&json!({"reason": reason, "interrupt": interrupt})),
            None => self.request(Method::POST, &format!("/v1/runs/{run}/resume")),
        };
        self.send(request).await.map(drop)
    }

    /// `stepstone secret` for the token's tenant, through `/v1/secrets`.
    pub async fn secret(&self, command: SecretCommand) -> anyhow::Result<()> {
        match command {
            SecretCommand::Set { name, scope } => {
                let request = self.request(Method::PUT, &format!("/v1/secrets/{name}"));
                self.send(scoped(request, &scope).body(secret_from_stdin()?)).await?;
                eprintln!("secret `{name}` set");
            }
            SecretCommand::List { scope } => {
                let request = self.request(Method::GET, "/v1/secrets");
                let listed = self.send(scoped(request, &scope)).await?;
                for name in listed["names"].as_array().into_iter().flatten() {
                    println!("{}", name.as_str().unwrap_or_default());
                }
            }
            SecretCommand::Delete { name, scope } => {
                let request = self.request(Method::DELETE, &format!("/v1/secrets/{name}"));
                self.send(scoped(request, &scope)).await?;
            }
        }
        Ok(())
    }

    pub async fn replay(&self, run: &str) -> anyhow::Result<Value> {
        self.send(self.request(Method::POST, &format!("/v1/runs/{run}/replay")))
            .await
    }
}

/// `request` for the component `scope` names, if any.
fn scoped(request: RequestBuilder, scope: &SecretScope) -> RequestBuilder {
    match &scope.component {
        Some(component) => request.query(&[("component", component.as_str())]),
        None => request,
    }
}
