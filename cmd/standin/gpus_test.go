package main

import (
	"errors"
	"reflect"
	"testing"

	"warden/pkg/gpu/fakegpu"
)

func TestVisibleGPUs(t *testing.T) {
	_, b := fakeGPUs(t, 3)
	d1, err := b.Device(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		value string
		set   bool
		want  []int
		err   error
	}{
		{"unset means all", "", false, []int{0, 1, 2}, nil},
		{"empty means none", "", true, nil, nil},
		{"indices", "2,0", true, []int{2, 0}, nil},
		{"uuid", d1.UUID + ",2", true, []int{1, 2}, nil},
		{"unknown index", "3", true, nil, fakegpu.ErrNoDevice},
		{"unknown uuid", "GPU-nope", true, nil, fakegpu.ErrNoDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := visibleGPUs(b, tc.value, tc.set)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if tc.err == nil && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("visibleGPUs(%q) = %v, want %v", tc.value, got, tc.want)
			}
		})
	}
}
