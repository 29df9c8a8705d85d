// Package docs holds sonde's documentation (the Markdown files of this
// directory) and the tests that keep it true to the code:
//
//   - every field of the configuration file is documented in
//     configuration.md, and every field documented there exists;
//   - every rule code the code cites is defined in semantics.md, and the
//     windows it gives for each preset are those the scheduler computes;
//   - the README's minimal configuration loads, with the windows it says;
//   - the relative links of the documents and of the README resolve, and
//     no document points outside the repository.
//
// The metrics reference, metrics.md, is compared with what a running
// daemon exports by the deploy module's TestMetricTableMatchesDaemon.
package docs
