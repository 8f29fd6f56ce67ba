//! An order saga: reserve stock, charge (retried), wait, ask for approval,
//! ship; if a later step fails for good, undo what was done with `refund`
//! and `release`, newest first. Builds with the features `fraud-check` or
//! `patched` check for fraud before charging (see `Cargo.toml`).
//!
//! Ids derive from the order id, never from randomness, so every run of the
//! same order gives the same output. An order's gift note comes back from
//! `ship` on its packing slip, however long: a payload of any size.

use std::time::Duration;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use stepstone_guest::{Error, Step, StepFailure, StepOptions, Workflow, export};

#[derive(Serialize, Deserialize)]
struct Order {
    order_id: String,
    item: String,
    amount_cents: u64,
    /// Makes `ship` fail permanently, to show the compensations.
    #[serde(default)]
    fail_shipping: bool,
    /// The durable sleep between payment and approval.
    #[serde(default = "default_sleep_ms")]
    sleep_ms: u64,
    #[serde(default = "default_approval_timeout_ms")]
    approval_timeout_ms: u64,
    /// A note `ship` prints on the packing slip, of any length: the
    /// shipment and the placed order carry it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gift_note: Option<String>,
}

fn default_sleep_ms() -> u64 {
    1_000
}

fn default_approval_timeout_ms() -> u64 {
    5_000
}

#[derive(Serialize, Deserialize)]
struct Reservation {
    reservation: String,
}

#[derive(Serialize, Deserialize)]
struct Charge {
    charge: String,
}

#[derive(Serialize, Deserialize)]
struct Shipment {
    tracking: String,
    /// The order's gift note, as printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    packing_slip: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Verdict {
    clear: bool,
}

#[derive(Deserialize)]
struct Approval {
    approved: bool,
}

#[derive(Serialize)]
struct Placed {
    order_id: String,
    status: &'static str,
    reservation: String,
    charge: String,
    tracking: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    packing_slip: Option<String>,
}

/// A step that undoes one the saga has done: `release` a reservation or
/// `refund` a charge, given its id.
struct Compensation {
    step: &'static str,
    id: String,
}

fn place_order(ctx: &Workflow, order: Order) -> Result<Placed, Error> {
    let mut compensations = Vec::new();
    fulfil(ctx, &order, &mut compensations).map_err(|failure| compensate(ctx, &order, &compensations, failure))
}

/// The saga's forward path; each done step pushes what would undo it.
fn fulfil(ctx: &Workflow, order: &Order, compensations: &mut Vec<Compensation>) -> Result<Placed, Error> {
    // The `reordered` build charges first, so replaying a journal recorded
    // by the normal build meets `charge` where the journal has `reserve`.
    let (reservation, charge) = if cfg!(feature = "reordered") {
        let charge = take_payment(ctx, order, compensations)?;
        (reserve_stock(ctx, order, compensations)?, charge)
    } else {
        let reservation = reserve_stock(ctx, order, compensations)?;
        if checks_fraud(ctx) {
            let verdict: Verdict = ctx.step("fraud-check", order)?;
            if !verdict.clear {
                return Err(format!("order {} was held by the fraud check", order.order_id).into());
            }
        }
        (reservation, take_payment(ctx, order, compensations)?)
    };
    ctx.sleep(Duration::from_millis(order.sleep_ms));
    await_approval(ctx, order)?;
    let shipment: Shipment = ctx.step("ship", order)?;
    Ok(Placed {
        order_id: order.order_id.clone(),
        status: "shipped",
        reservation: reservation.reservation,
        charge: charge.charge,
        tracking: shipment.tracking,
        packing_slip: shipment.packing_slip,
    })
}

/// Whether this build checks for fraud, and this run takes that change:
/// with `patched`, a run recorded before the change answers no and replays
/// as it ran.
fn checks_fraud(ctx: &Workflow) -> bool {
    if cfg!(feature = "patched") {
        ctx.patched("fraud-check")
    } else {
        cfg!(feature = "fraud-check")
    }
}

fn reserve_stock(ctx: &Workflow, order: &Order, compensations: &mut Vec<Compensation>) -> Result<Reservation, Error> {
    let reservation: Reservation = ctx.step("reserve", order)?;
    compensations.push(Compensation {
        step: "release",
        id: reservation.reservation.clone(),
    });
    Ok(reservation)
}

fn take_payment(ctx: &Workflow, order: &Order, compensations: &mut Vec<Compensation>) -> Result<Charge, Error> {
    let retry = StepOptions::new()
        .max_attempts(3)
        .initial_backoff(Duration::from_millis(100));
    let charge: Charge = ctx.step_with("charge", order, retry)?;
    compensations.push(Compensation {
        step: "refund",
        id: charge.charge.clone(),
    });
    Ok(charge)
}

fn await_approval(ctx: &Workflow, order: &Order) -> Result<(), Error> {
    let timeout = Duration::from_millis(order.approval_timeout_ms);
    match ctx.signal::<Approval>("approve", timeout)? {
        Some(Approval { approved: true }) => Ok(()),
        Some(Approval { approved: false }) => Err("the order was not approved".into()),
        None => Err(format!("no approval within {} ms", order.approval_timeout_ms).into()),
    }
}

/// Undoes `compensations`, newest first, and says what happened. A
/// compensation that fails is reported, and the others still run.
fn compensate(ctx: &Workflow, order: &Order, compensations: &[Compensation], failure: Error) -> Error {
    let undone: Vec<String> = compensations
        .iter()
        .rev()
        .map(|Compensation { step, id }| match ctx.step::<_, IgnoredAny>(step, id) {
            Ok(_) => format!("{step} {id}"),
            Err(error) => format!("{step} {id} FAILED: {error}"),
        })
        .collect();
    let undone = if undone.is_empty() {
        "nothing to compensate".to_owned()
    } else {
        format!("compensated: {}", undone.join(", "))
    };
    format!("order {} not placed: {failure}; {undone}", order.order_id).into()
}

fn reserve(ctx: &Step, order: Order) -> Result<Reservation, StepFailure> {
    ctx.info(&format!("reserving {} for {}", order.item, order.order_id));
    Ok(Reservation {
        reservation: format!("res-{}", order.order_id),
    })
}

/// Fails its first attempt, as a flaky payment service would, to show the
/// caller's retry policy at work.
fn charge(ctx: &Step, order: Order) -> Result<Charge, StepFailure> {
    if ctx.attempt() == 1 {
        return Err("payment service unavailable (the first attempt always fails)".into());
    }
    ctx.info(&format!("charging {} cents for {}", order.amount_cents, order.order_id));
    Ok(Charge {
        charge: format!("ch-{}", order.order_id),
    })
}

/// Clears every order of at most 10,000.00 (the builds that call it).
fn fraud_check(ctx: &Step, order: Order) -> Result<Verdict, StepFailure> {
    ctx.info(&format!("checking {} for fraud", order.order_id));
    Ok(Verdict {
        clear: order.amount_cents <= 1_000_000,
    })
}

fn ship(ctx: &Step, order: Order) -> Result<Shipment, StepFailure> {
    if order.fail_shipping {
        return Err(StepFailure::permanent(format!("no carrier takes {}", order.item)));
    }
    ctx.info(&format!("shipping {} for {}", order.item, order.order_id));
    Ok(Shipment {
        tracking: format!("trk-{}", order.order_id),
        packing_slip: order.gift_note,
    })
}

fn refund(ctx: &Step, charge: String) -> Result<String, StepFailure> {
    ctx.info(&format!("refunding {charge}"));
    Ok(format!("refunded {charge}"))
}

fn release(ctx: &Step, reservation: String) -> Result<String, StepFailure> {
    ctx.info(&format!("releasing {reservation}"));
    Ok(format!("released {reservation}"))
}

export! {
    workflows: {
        "place-order" => place_order,
    },
    steps: {
        "reserve" => reserve,
        "charge" => charge,
        "fraud-check" => fraud_check,
        "ship" => ship,
        "refund" => refund,
        "release" => release,
    },
}
