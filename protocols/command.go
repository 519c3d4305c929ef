package protocols

// Expand expands a command's ${VAR}s: an argument vector, or a shell line
// run by /bin/sh -c.
func (c CommandSpec) Expand(vars map[string]string) ([]string, error) {
	if c.Shell != "" {
		s, err := Expand(c.Shell, vars)
		if err != nil {
			return nil, err
		}
		return []string{"/bin/sh", "-c", s}, nil
	}
	out := make([]string, len(c.Argv))
	for i, arg := range c.Argv {
		s, err := Expand(arg, vars)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}
