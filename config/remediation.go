package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Defaults of a remediation, App Service's (R1): replace an instance that
// stayed unhealthy for an hour, at most one per hour and three per day.
const (
	DefaultRemediationAfter   = time.Hour
	DefaultMaxPerHour         = 1
	DefaultMaxPerDay          = 3
	DefaultMaxPer12h          = 0 // no cap
	DefaultRemediationTimeout = time.Minute
	maxBudget                 = 1 << 20
)

// Remediation is one entry of "remediation": an action (a command, a
// webhook or both) fired for an instance — a target address — that has
// stayed unhealthy for After in one listed pool and is unhealthy in every
// other listed pool that contains it and probes it (R1, R2), within a budget
// of firings per hour, 12 hours and day.
// Pool policy (P1–P3) has no say: a single instance, or every instance of a
// pool, is still acted on.
type Remediation struct {
	Name      string        // unique name; the budget is the remediation's, like an App Service plan's
	Pools     []string      // names of the pools whose targets it may act on
	PoolIndex []int         // the same pools as indices into Config.Pools
	After     time.Duration // how long an instance must stay unhealthy, continuously, in one of the pools
	// MaxPerHour and MaxPerDay cap the firings in any 1 h and 24 h,
	// MaxPer12h those in each 12-hour period (a count that resets every 12
	// hours); 0 means no cap. A failed action counts like a good one.
	MaxPerHour, MaxPer12h, MaxPerDay int
	Command                          []string      // program and arguments, run without a shell; nil for none
	WebhookURL                       string        // http(s) URL the action is POSTed to; "" for none
	WebhookSecretFile                string        // file holding the HMAC key of the webhook's signature; "" for none
	Timeout                          time.Duration // bound of the command, and of each webhook attempt

	index int // position in the file, for error messages
}

// field returns the path of one of the remediation's fields.
func (r *Remediation) field(name string) string {
	return fmt.Sprintf("remediation[%d].%s", r.index, name)
}

// resolveRemediations resolves and validates the "remediation" entries
// against the pools.
func resolveRemediations(specs []*RemediationSpec, pools []*Pool, files *fileReader) ([]*Remediation, error) {
	var out []*Remediation
	for i, s := range specs {
		r, err := resolveRemediation(i, s, pools, files)
		if err != nil {
			return nil, err
		}
		for j, q := range out {
			if q.Name == r.Name {
				return nil, fieldErr(r.field("name"), "%q is already the name of remediation[%d]", r.Name, j)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func resolveRemediation(i int, s *RemediationSpec, pools []*Pool, files *fileReader) (*Remediation, error) {
	r := &Remediation{index: i}
	if s == nil {
		return nil, fieldErr(fmt.Sprintf("remediation[%d]", i), "empty entry")
	}
	if s.Name == nil {
		return nil, fieldErr(r.field("name"), "missing")
	}
	r.Name = *s.Name
	if !validName(r.Name) {
		return nil, fieldErr(r.field("name"), "%q is not a valid name; want %s", r.Name, nameRule)
	}
	if len(s.Pools) == 0 {
		return nil, fieldErr(r.field("pools"), "missing; name the pools whose targets the remediation may act on")
	}
	for j, name := range s.Pools {
		f := fmt.Sprintf("%s[%d]", r.field("pools"), j)
		pi := slices.IndexFunc(pools, func(p *Pool) bool { return p.Name == name })
		if pi < 0 {
			return nil, fieldErr(f, "%q is not a defined pool", name)
		}
		if slices.Contains(r.Pools, name) {
			return nil, fieldErr(f, "%q is listed twice", name)
		}
		r.Pools = append(r.Pools, name)
		r.PoolIndex = append(r.PoolIndex, pi)
	}
	r.After = pickDur(s.After, DefaultRemediationAfter)
	if err := checkDur(r.field("after"), r.After, durationRange, ""); err != nil {
		return nil, err
	}
	for _, b := range []struct {
		name string
		p    *int
		def  int
		dst  *int
	}{
		{"max_per_hour", s.MaxPerH, DefaultMaxPerHour, &r.MaxPerHour},
		{"max_per_12h", s.MaxPer12H, DefaultMaxPer12h, &r.MaxPer12h},
		{"max_per_day", s.MaxPerDay, DefaultMaxPerDay, &r.MaxPerDay},
	} {
		*b.dst = pick(b.p, b.def)
		if err := checkInt(r.field(b.name), *b.dst, intRange{0, maxBudget}, ""); err != nil {
			return nil, err
		}
	}
	r.Timeout = pickDur(s.Timeout, DefaultRemediationTimeout)
	if err := checkDur(r.field("timeout"), r.Timeout, durationRange, ""); err != nil {
		return nil, err
	}
	if s.Command == nil && s.Webhook == nil {
		return nil, fieldErr(fmt.Sprintf("remediation[%d]", i), "no action; set command, webhook or both")
	}
	if err := r.resolveCommand(s.Command, files.dir); err != nil {
		return nil, err
	}
	if s.Webhook != nil {
		if err := r.resolveWebhook(s.Webhook, files); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// resolveCommand checks the command's program and arguments. A program
// given with a directory ("bin/replace", "./replace") is relative to the
// config's directory, and made absolute here: never a bare name, which
// would be looked up in PATH (filepath.Join(".", "./replace") is
// "replace"). A bare name is looked up in PATH when it runs, as a shell
// does.
func (r *Remediation) resolveCommand(argv []string, dir string) error {
	if argv == nil {
		return nil
	}
	if len(argv) == 0 || argv[0] == "" {
		return fieldErr(r.field("command"), "no program; want [program, arguments...]")
	}
	for j, a := range argv {
		if strings.ContainsRune(a, 0) {
			return fieldErr(fmt.Sprintf("%s[%d]", r.field("command"), j), "%q contains a NUL byte", a)
		}
	}
	r.Command = slices.Clone(argv)
	if strings.ContainsRune(argv[0], '/') {
		abs, err := filepath.Abs(resolvePath(dir, argv[0]))
		if err != nil {
			return &FieldError{Field: r.field("command") + "[0]", Msg: fmt.Sprintf("%q: %s", argv[0], errText(err)), Err: err}
		}
		r.Command[0] = abs
	}
	return nil
}

func (r *Remediation) resolveWebhook(s *WebhookSpec, files *fileReader) error {
	f := r.field("webhook")
	if _, err := checkWebhookURL(f+".url", s.URL); err != nil {
		return err
	}
	r.WebhookURL = *s.URL
	if s.SecretFile != nil {
		abs, err := files.secret(f+".secret_file", *s.SecretFile)
		if err != nil {
			return err
		}
		r.WebhookSecretFile = abs
	}
	return nil
}
