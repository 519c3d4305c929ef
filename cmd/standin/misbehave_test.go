package main

import (
	"strings"
	"testing"
)

func TestMisbehaveValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  misbehaveConfig
		want string
	}{
		{misbehaveConfig{streamBreak: "not-json"}, ""},
		{misbehaveConfig{startProfileStatus: 500, stopProfileStatus: 503}, ""},
		{misbehaveConfig{streamBreak: "sometimes"}, "--stream-break"},
		{misbehaveConfig{stopProfileStatus: 42}, "want an HTTP status"},
	} {
		err := tc.cfg.validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
