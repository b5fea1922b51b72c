package policy_test

import (
	"fmt"

	"github.com/moat-sandbox/moat/policy"
)

func ExampleSign() {
	// A key pair as minisign files. A real key gets a password; "" keeps
	// the example fast (no scrypt) and stores the key unencrypted.
	pubFile, keyFile, err := policy.GenerateKey("")
	if err != nil {
		panic(err)
	}
	key, err := policy.ParsePrivateKey(keyFile, "")
	if err != nil {
		panic(err)
	}

	// The publisher signs the module and its manifest, and ships the result
	// as hello.wasm.minisig.
	s := policy.Signed{
		Name:     "hello-go",
		Module:   []byte("\x00asm\x01\x00\x00\x00"),
		Manifest: []byte("name: hello-go\n"),
	}
	sig, err := policy.Sign(key, s)
	if err != nil {
		panic(err)
	}

	// The operator trusts the public key under a name, and verifies.
	pub, err := policy.ParsePublicKey(string(pubFile))
	if err != nil {
		panic(err)
	}
	trusted := map[string]policy.PublicKey{"release": pub}
	v, err := policy.Verify(trusted, s, sig)
	if err != nil {
		panic(err)
	}
	fmt.Println(v.KeyName, "ok")

	// Granting the module more in its manifest breaks the signature.
	s.Manifest = []byte("name: hello-go\nnet: all\n")
	_, err = policy.Verify(trusted, s, sig)
	fmt.Println(err)
	// Output:
	// release ok
	// signature: module hello-go: the manifest changed since signing (signed sha256:7dbda67be752…, now sha256:f94454e90e8b…)
}
