package media_test

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"

	"github.com/moat-sandbox/moat/host/media"
)

// Ingest names the type from the bytes, reads the dimensions from the
// header, and drops what is not pixels: here a comment holding a script,
// and a page appended after the image.
func ExampleIngest() {
	var b bytes.Buffer
	jpeg.Encode(&b, image.NewGray(image.Rect(0, 0, 64, 32)), nil)
	comment := []byte("\xFF\xFE\x00\x0a<script>")
	photo := append(append(append([]byte{}, b.Bytes()[:2]...), comment...), b.Bytes()[2:]...)
	photo = append(photo, "<html>"...)

	it, err := media.Ingest(photo, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(it.Type, it.Width, it.Height)
	fmt.Println("script kept:", bytes.Contains(it.Data, []byte("<script>")), "page kept:", bytes.Contains(it.Data, []byte("<html>")))

	_, err = media.Ingest([]byte("<svg onload=alert(1)>"), "image/png")
	fmt.Println(err)
	// Output:
	// image/jpeg 64 32
	// script kept: false page kept: false
	// invalid_argument: the data was said to be image/png but its bytes are of no type the host keeps; they look like text/plain; charset=utf-8
}
