//go:build !race

package fatvol_test

const raceEnabled = false
