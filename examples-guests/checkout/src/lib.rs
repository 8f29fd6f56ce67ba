//! A checkout saga against a real payment service: `charge` POSTs the
//! order to `{payments_url}/charges` with the tenant's API key (the secret
//! `payments-api-key`) and the call's idempotency key, then `ship`; if
//! shipping fails for good, `refund` undoes the charge the same way.
//!
//! The idempotency key is the same for every attempt of a call on any
//! host, so a service that honours it charges an order once however often
//! the attempt is retried or its host dies mid-request. `charge` may also
//! be another component's step of the same contract (`py-steps/charge`,
//! `js-steps/charge`), named by the order's `charge_step`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stepstone_guest::http::{Request, Response};
use stepstone_guest::{Error, Step, StepFailure, StepOptions, Workflow, export};

/// The secret holding the payment service's API key.
const API_KEY_SECRET: &str = "payments-api-key";

#[derive(Serialize, Deserialize)]
struct Order {
    order_id: String,
    amount_cents: u64,
    /// Where the payment service listens, e.g. `https://payments.example.com`.
    payments_url: String,
    /// The step that charges: `charge` (this component's) by default.
    #[serde(default = "default_charge_step")]
    charge_step: String,
    /// Makes `ship` fail for good, to show the refund.
    #[serde(default)]
    fail_shipping: bool,
}

fn default_charge_step() -> String {
    "charge".into()
}

/// What `charge` sends and `refund` is given.
#[derive(Serialize, Deserialize)]
struct ChargeRequest {
    payments_url: String,
    order_id: String,
    amount_cents: u64,
}

#[derive(Serialize, Deserialize)]
struct RefundRequest {
    payments_url: String,
    charge_id: String,
}

#[derive(Serialize)]
struct CheckedOut {
    order_id: String,
    status: &'static str,
    /// The payment service's answer to the charge.
    charge: Value,
    tracking: String,
}

fn checkout(ctx: &Workflow, order: Order) -> Result<CheckedOut, Error> {
    let retry = StepOptions::new()
        .max_attempts(5)
        .initial_backoff(Duration::from_millis(100))
        .timeout(Duration::from_secs(10));
    let request = ChargeRequest {
        payments_url: order.payments_url.clone(),
        order_id: order.order_id.clone(),
        amount_cents: order.amount_cents,
    };
    let charge: Value = ctx.step_with(&order.charge_step, &request, retry.clone())?;
    match ctx.step::<_, String>("ship", &order) {
        Ok(tracking) => Ok(CheckedOut {
            order_id: order.order_id,
            status: "shipped",
            charge,
            tracking,
        }),
        Err(failure) => Err(refund_for(ctx, &order, &charge, retry, &failure.to_string())),
    }
}

/// Refunds `charge` after `failure`, and says what was done.
fn refund_for(ctx: &Workflow, order: &Order, charge: &Value, retry: StepOptions, failure: &str) -> Error {
    let Some(charge_id) = charge["charge_id"].as_str() else {
        return format!(
            "order {} not shipped ({failure}); its charge has no id to refund: {charge}",
            order.order_id
        )
        .into();
    };
    let refund = RefundRequest {
        payments_url: order.payments_url.clone(),
        charge_id: charge_id.to_owned(),
    };
    let undone = match ctx.step_with::<_, Value>("refund", &refund, retry) {
        Ok(_) => format!("refunded {charge_id}"),
        Err(error) => format!("refund of {charge_id} FAILED: {error}"),
    };
    format!("order {} not shipped: {failure}; {undone}", order.order_id).into()
}

fn charge(ctx: &Step, request: ChargeRequest) -> Result<Value, StepFailure> {
    let body = json!({"order_id": request.order_id, "amount_cents": request.amount_cents});
    let response = post(ctx, &format!("{}/charges", request.payments_url), &body)?;
    answer(response, "charge")
}

fn refund(ctx: &Step, request: RefundRequest) -> Result<Value, StepFailure> {
    let body = json!({"charge_id": request.charge_id});
    let response = post(ctx, &format!("{}/refunds", request.payments_url), &body)?;
    answer(response, "refund")
}

/// POSTs `body` with the tenant's API key, this call's idempotency key and
/// the attempt's fencing token (a service refuses a token lower than one
/// it saw for the key: a host that lost the run cannot act after its new
/// owner).
fn post(ctx: &Step, url: &str, body: &Value) -> Result<Response, StepFailure> {
    let api_key = ctx.secret(API_KEY_SECRET)?.ok_or_else(|| {
        StepFailure::permanent(format!(
            "the tenant has no secret `{API_KEY_SECRET}`: set it with `stepstone secret set {API_KEY_SECRET}`"
        ))
    })?;
    ctx.info(&format!("POST {url}, attempt {}", ctx.attempt()));
    Ok(Request::post(url)
        .header("authorization", format!("Bearer {api_key}"))
        .header("idempotency-key", ctx.idempotency_key())
        .header("fencing-token", ctx.fencing_token().to_string())
        .json(body)?
        .send()?)
}

/// The service's JSON answer; a server error is worth retrying, a refusal
/// is not.
fn answer(response: Response, what: &str) -> Result<Value, StepFailure> {
    let status = response.status();
    match status {
        200..=299 => Ok(response.json()?),
        500..=599 => Err(StepFailure::retryable(format!("payment service answered {status}"))),
        _ => Err(StepFailure::permanent(format!(
            "payment service refused the {what}: {status} {}",
            response.text()?
        ))),
    }
}

fn ship(_ctx: &Step, order: Order) -> Result<String, StepFailure> {
    if order.fail_shipping {
        return Err(StepFailure::permanent(format!(
            "nothing to ship order {} with",
            order.order_id
        )));
    }
    Ok(format!("track-{}", order.order_id))
}

export! {
    workflows: {
        "checkout" => checkout,
    },
    steps: {
        "charge" => charge,
        "refund" => refund,
        "ship" => ship,
    },
}
