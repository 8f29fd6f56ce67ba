//! `/v1/usage`: what the tenant used per UTC day, over every host.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::ApiState;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::Query;
use super::responses::{Malformed, Refusals};
use crate::clock::{now_ms, rfc3339};
use crate::runtime::{DayUsage, day_of};

/// The most days one answer covers.
const MAX_DAYS: u32 = 31;

#[derive(Deserialize, IntoParams)]
pub struct UsageParams {
    /// How many days, today (UTC) and those before it: 1 to 31, 1 if absent.
    #[param(minimum = 1, maximum = 31)]
    days: Option<u32>,
}

/// One UTC day's use.
#[derive(Serialize, ToSchema)]
pub struct Day {
    /// The day, `YYYY-MM-DD`.
    pub day: String,
    #[serde(flatten)]
    pub used: DayUsage,
}

/// The tenant's use, newest day first, and what it stores now.
#[derive(Serialize, ToSchema)]
pub struct UsageReport {
    pub days: Vec<Day>,
    /// Bytes of every object the tenant has in the store (components, runs,
    /// secrets, schedules...), counted now.
    pub stored_bytes: u64,
}

/// Fuel burnt, runs started, step attempts and outgoing requests per UTC day, and bytes stored.
#[utoipa::path(get, path = "/v1/usage", params(UsageParams), responses((status = 200, body = UsageReport), Malformed, Refusals))]
pub async fn usage(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Query(UsageParams { days }): Query<UsageParams>,
) -> Result<Json<UsageReport>, ApiError> {
    let days = days.unwrap_or(1);
    if !(1..=MAX_DAYS).contains(&days) {
        return Err(ApiError::bad_request(format!(
            "days is {days}: ask for 1 to {MAX_DAYS}"
        )));
    }
    let today = day_of(now_ms());
    let mut report = Vec::new();
    for day in (0..u64::from(days)).map(|back| today.saturating_sub(back)) {
        let used = state.runtime.usage().day(&tenant.id, day).await?;
        let name = rfc3339(day * 86_400_000).chars().take(10).collect();
        report.push(Day { day: name, used });
    }
    let stored = state.runtime.usage().stored_bytes(&tenant.id).await?;
    Ok(Json(UsageReport {
        days: report,
        stored_bytes: stored,
    }))
}
