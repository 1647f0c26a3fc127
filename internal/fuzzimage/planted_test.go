package fuzzimage

import (
	"testing"
)

// TestPlantedImages makes every planted image: PlantedImages itself checks that fsck.fat -n
// calls the clean ones clean and reports each defect.
func TestPlantedImages(t *testing.T) {
	images := PlantedImages(t)
	classes := map[string]int{}
	for _, im := range images {
		classes[im.Class]++
	}
	for _, d := range Defects {
		if classes[d.Class] == 0 {
			t.Errorf("no image with %s", d.Class)
		}
	}
	t.Logf("%d images, %d classes", len(images), len(classes))
	if labels := LabelImages(t); len(labels) == 0 {
		t.Error("no label images")
	}
}
