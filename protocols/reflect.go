package protocols

import (
	"reflect"
	"strconv"
)

func reflectValue(p any) reflect.Value { return reflect.ValueOf(p).Elem() }

func itoa(i int) string { return strconv.Itoa(i) }
