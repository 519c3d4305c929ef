package protocols

import (
	"fmt"
	"regexp"
	"strings"
)

// Variables. Commands, environment values and run id templates may use
// ${NAME}; $$ is a literal $. The set of names is closed: a name that is not
// one of these is an error when the protocol is validated.
//
// Known when the plan is made (substituted in the plan):
//
//	RUN_ID     the run's id                  PHASE   the phase's name
//	CELL       the cell, e.g. P05/C00        CELL_ID the cell as an id, e.g. P05.C00
//	LOAD       the load point's name         REPEAT  the repeat number (1-based)
//	<AXIS>     each matrix axis's value, the axis name in upper case (PATTERN, CONFIG)
//	DRAIN_ALLOWANCE_S  the run's class's drain allowance, in seconds
//	DRAIN_WATCHDOG_S   the run's class's drain watchdog, in seconds
//	<VAR>      the protocol's vars and the vars of the cell's axis values
//
// Known when an attempt starts (kept as ${NAME} in the plan, substituted at launch):
//
//	CAMPAIGN_DIR  the campaign directory       RUN_DIR     CAMPAIGN_DIR/runs/RUN_ID
//	ATTEMPT_DIR   RUN_DIR/aN, this attempt's    ATTEMPT     the attempt number
//	GPU_IDS       comma-separated GPU indices   GPU_COUNT   how many
//	CPUS          the slot's CPU list           NUMA_NODE   the slot's NUMA node
//	PORT          the slot's port               SLOT        the slot's name
//	REGIME        the regime in force           PHASE_FILE  file the client appends its phases to
//	PROTOCOL_DIR  directory of the protocol     WORKDIR     where commands run
//	NEED_<AS>_DIR the result (attempt) directory of each run this one needs
//	CAPACITY_RATE a capacity point's arrival rate (requests/s), decided from the search's recorded results

// LaunchVars are the names substituted when an attempt starts.
var LaunchVars = []string{
	"CAMPAIGN_DIR", "RUN_DIR", "ATTEMPT_DIR", "ATTEMPT", "GPU_IDS", "GPU_COUNT", "CPUS",
	"NUMA_NODE", "PORT", "SLOT", "REGIME", "PHASE_FILE", "PROTOCOL_DIR", "WORKDIR",
}

// planVars are the built-in names substituted in the plan.
var planVars = []string{"RUN_ID", "PHASE", "CELL", "CELL_ID", "LOAD", "REPEAT", "DRAIN_ALLOWANCE_S", "DRAIN_WATCHDOG_S"}

var varName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

func isBuiltin(name string) bool {
	for _, n := range LaunchVars {
		if n == name {
			return true
		}
	}
	for _, n := range planVars {
		if n == name {
			return true
		}
	}
	return name == RateVar || strings.HasPrefix(name, "NEED_") && strings.HasSuffix(name, "_DIR")
}

// templateError is a problem in one template, with the byte offset.
type templateError struct {
	off int
	msg string
}

// expand substitutes the variables of a template. lookup returns a value
// and true for a name it knows; keep returns true for a name that stays as
// ${NAME} (a launch-time variable during planning). Literal $ in the result
// is written $$ when escape is set, so the result is again a template.
func expand(tmpl string, lookup func(string) (string, bool), keep func(string) bool, escape bool) (string, []templateError) {
	var b strings.Builder
	var errs []templateError
	lit := func(s string) {
		if escape {
			s = strings.ReplaceAll(s, "$", "$$")
		}
		b.WriteString(s)
	}
	for i := 0; i < len(tmpl); {
		c := tmpl[i]
		if c != '$' {
			j := strings.IndexByte(tmpl[i:], '$')
			if j < 0 {
				j = len(tmpl) - i
			}
			lit(tmpl[i : i+j])
			i += j
			continue
		}
		switch {
		case i+1 < len(tmpl) && tmpl[i+1] == '$':
			lit("$")
			i += 2
		case i+1 < len(tmpl) && tmpl[i+1] == '{':
			end := strings.IndexByte(tmpl[i+2:], '}')
			if end < 0 {
				errs = append(errs, templateError{i, "unclosed ${ (write $$ for a literal $)"})
				lit(tmpl[i:])
				i = len(tmpl)
				continue
			}
			name := tmpl[i+2 : i+2+end]
			i += 3 + end
			switch {
			case !varName.MatchString(name):
				errs = append(errs, templateError{i, fmt.Sprintf("%q is not a variable name (names are upper case letters, digits and _)", name)})
			case keep != nil && keep(name):
				b.WriteString("${" + name + "}")
			default:
				if v, ok := lookup(name); ok {
					lit(v)
				} else {
					errs = append(errs, templateError{i, fmt.Sprintf("unknown variable ${%s}", name)})
				}
			}
		case i+1 < len(tmpl) && (isLetter(tmpl[i+1]) || tmpl[i+1] == '_'):
			j := i + 1
			for j < len(tmpl) && (isLetter(tmpl[j]) || tmpl[j] == '_' || (tmpl[j] >= '0' && tmpl[j] <= '9')) {
				j++
			}
			errs = append(errs, templateError{i, fmt.Sprintf("$%s is not expanded (commands run without a shell): write ${%s}, or $$ for a literal $", tmpl[i+1:j], tmpl[i+1:j])})
			lit(tmpl[i:j])
			i = j
		default:
			lit("$")
			i++
		}
	}
	return b.String(), errs
}

func isLetter(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// Expand substitutes launch-time variables into a template from the plan.
// Every variable must be in vars: the plan has already substituted the rest.
func Expand(tmpl string, vars map[string]string) (string, error) {
	out, errs := expand(tmpl, func(n string) (string, bool) { v, ok := vars[n]; return v, ok }, nil, false)
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.msg
		}
		return "", fmt.Errorf("expand %q: %s", tmpl, strings.Join(msgs, "; "))
	}
	return out, nil
}

// Unescape turns a plan template with no variables left into its text.
func Unescape(tmpl string) string { return strings.ReplaceAll(tmpl, "$$", "$") }
