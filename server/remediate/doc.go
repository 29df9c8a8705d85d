// Package remediate fires sonde's remediation actions: App Service's
// instance replacement (docs/semantics.md R1, R2) as a command, a webhook or both,
// for any pool.
//
// An instance is a target address. A remediation acts on an instance when
// it has stayed unhealthy, continuously and for the remediation's "after",
// in one of the remediation's pools, and is unhealthy at that moment in
// every other one of them that contains it and probes it (R2: an instance
// hosting several health-checked apps is replaced only when every one of
// them is unhealthy on it; how long the others have been unhealthy does not
// matter; a pool with health checks off or a target disabled there does not
// count). Routing has no say (R2): a single
// instance, or every instance of a pool failing open, is still acted on.
// Within a pool, an instance is unhealthy when every target the pool has at
// its address is unhealthy and has been probed at least once.
//
// Firings are rate-limited per remediation, like App Service's per plan: at
// most MaxPerHour in any hour and MaxPerDay in any 24 hours (sliding
// windows), and MaxPer12h in each 12-hour period (App Service's count per
// scale unit "resets every 12 hours": a period begins with the first firing
// when none is open and its count resets 12 h later); 0 means no cap. A
// firing takes its slot
// when it starts, and keeps it if the action fails, so a broken tool is not
// run again and again. An instance that stays unhealthy after a firing is
// due again one "after" later. Every firing and every firing withheld, by a
// budget or by the multi-pool rule, is logged, counted and kept for the API;
// a withheld firing is recorded once per cause, not at every evaluation:
// again when the cause changes (say the pool that kept it from multi_pool
// fails too and a budget is full) or when it is due anew after waiting.
//
// A [Manager] lives as long as the daemon. Configuration generations come
// and go ([Manager.Use]); budgets and per-instance state are kept by
// remediation name and address, so they survive a reload. Its timing logic
// runs on the time given to [Manager.Evaluate], which tests drive with a
// simulated clock.
package remediate
