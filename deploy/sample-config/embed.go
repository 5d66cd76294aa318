// Package sampleconfig holds the relay's built-in sample resources: the
// YAML files of this directory, embedded in the binary so that xds-relay
// started with neither --upstream nor --source serves them from any
// working directory (a container, go install, a release binary).
package sampleconfig

import "embed"

// FS holds the sample's resource files at its root.
//
//go:embed *.yaml
var FS embed.FS

// Name labels the embedded sample in logs, errors and the status page.
const Name = "embedded sample (deploy/sample-config)"
