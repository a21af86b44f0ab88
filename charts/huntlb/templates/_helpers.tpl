{{/* The workload's name: its Deployment, its Service, its pods' name label. */}}
{{- define "huntlb.name" -}}
{{- default .Release.Name .Values.workload.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The headless Service fleet_peers names: one per release, so two fleets share a namespace. */}}
{{- define "huntlb.fleetService" -}}
{{- printf "%s-fleet" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "huntlb.configMap" -}}
{{- printf "%s-huntlb-agent" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "huntlb.secret" -}}
{{- default (printf "%s-fleet-key" .Release.Name | trunc 63 | trimSuffix "-") .Values.fleetKey.existingSecret -}}
{{- end -}}

{{/* Members: the headless Service, the NetworkPolicy and a PodMonitor select them. */}}
{{- define "huntlb.fleetLabels" -}}
huntlb.io/fleet: {{ .Release.Name | quote }}
{{- end -}}

{{- define "huntlb.selectorLabels" -}}
app.kubernetes.io/name: {{ include "huntlb.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "huntlb.labels" -}}
{{ include "huntlb.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: huntlb
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Every address the agent binds: IPv4's or IPv6's unspecified address. */}}
{{- define "huntlb.bind" -}}
{{- if eq .Values.ipFamily "IPv6" }}[::]{{ else }}0.0.0.0{{ end -}}
{{- end -}}

{{/* The pod's IP alone (Kubernetes expands $(POD_IP)): the agent adds listen's port, bracketing an IPv6 IP. */}}
{{- define "huntlb.advertise" -}}
$(POD_IP)
{{- end -}}

{{/* The values a mistake in which would start agents that never work: refused here, the key named. */}}
{{- define "huntlb.validate" -}}
{{- if not (has .Values.fronts.mode (list "plain" "hunt-pass")) -}}
{{- fail (printf "fronts.mode: %q is neither plain nor hunt-pass" .Values.fronts.mode) -}}
{{- end -}}
{{- if not (has .Values.ipFamily (list "IPv4" "IPv6")) -}}
{{- fail (printf "ipFamily: %q is neither IPv4 nor IPv6" .Values.ipFamily) -}}
{{- end -}}
{{- if and (not .Values.fleetKey.existingSecret) (not .Values.fleetKey.value) (not .Values.inject.deployment) -}}
{{- fail "fleetKey: set fleetKey.existingSecret (a Secret you manage) or fleetKey.value (--set-file fleetKey.value=fleet.key; make one with: openssl rand -hex 32)" -}}
{{- end -}}
{{- if and .Values.fleetKey.existingSecret .Values.fleetKey.value -}}
{{- fail "fleetKey: set existingSecret or value, not both" -}}
{{- end -}}
{{- if and .Values.workload.enabled (not .Values.workload.containers) -}}
{{- fail "workload.containers: empty; paste your app's containers (listening on agent.app), or set workload.enabled=false and use the post-renderer" -}}
{{- end -}}
{{- if lt (int .Values.workload.appPreStopSeconds) (int (div .Values.agent.drainGraceMs 1000)) -}}
{{- fail (printf "workload.appPreStopSeconds: %v is shorter than agent.drainGraceMs (%v ms): the app would stop while the agent still relays to it" .Values.workload.appPreStopSeconds .Values.agent.drainGraceMs) -}}
{{- end -}}
{{- if and .Values.fronts.envoyGateway.enabled .Values.fronts.envoyGateway.httpRoute.create (not .Values.fronts.envoyGateway.httpRoute.parentRefs) -}}
{{- fail "fronts.envoyGateway.httpRoute.parentRefs: empty; name your Gateway, or set httpRoute.create=false and httpRoute.name to your own HTTPRoute" -}}
{{- end -}}
{{- end -}}

{{/* The agent container, in front of the app: the Deployment here and the post-renderer's patch both use it. */}}
{{- define "huntlb.agentContainer" -}}
- name: huntlb-agent
  image: {{ printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: [huntlb-agent]
  # What only the pod knows: its IP (peers forward to it, and its reports come
  # from it) and its name (its logs, and hunt-served-by).
  args:
  - --config=/etc/huntlb/config/agent.toml
  - --id=$(POD_NAME)
  - --fleet-advertise={{ include "huntlb.advertise" . }}
  env:
  - name: POD_IP
    valueFrom: {fieldRef: {fieldPath: status.podIP}}
  - name: POD_NAME
    valueFrom: {fieldRef: {fieldPath: metadata.name}}
  ports:
  - {name: huntlb, containerPort: {{ .Values.agent.port }}, protocol: TCP}
  - {name: huntlb-fleet, containerPort: {{ .Values.agent.fleetPort }}, protocol: UDP}
  - {name: huntlb-admin, containerPort: {{ .Values.agent.adminPort }}, protocol: TCP}
  # Ready while the agent serves and its app answers: 503 when draining, the
  # app unreachable or stalled; the pod leaves the Service's endpoints then.
  readinessProbe:
    httpGet: {path: {{ .Values.agent.healthPath }}, port: huntlb}
    periodSeconds: 2
    timeoutSeconds: 1
    failureThreshold: 2
  # Alive while the agent answers at all: /metrics asks nothing of the app, so
  # a busy or stalled app never gets its pod restarted by this probe.
  livenessProbe:
    httpGet: {path: /metrics, port: huntlb-admin}
    periodSeconds: 10
    timeoutSeconds: 2
    failureThreshold: 3
  # No preStop: SIGTERM itself starts the agent's drain (health 503 at once,
  # offers refused, idle connections closed, in-flight requests finished).
  resources: {{- toYaml .Values.agent.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities: {drop: [ALL]}
    seccompProfile: {type: RuntimeDefault}
  volumeMounts:
  - {name: huntlb-config, mountPath: /etc/huntlb/config, readOnly: true}
  # A directory, never subPath: the kubelet updates a Secret's files in place
  # (a key rotation) only where the whole volume is mounted.
  - {name: huntlb-fleet-key, mountPath: /etc/huntlb/fleet, readOnly: true}
{{- end -}}

{{- define "huntlb.agentVolumes" -}}
- name: huntlb-config
  configMap: {name: {{ include "huntlb.configMap" . }}}
- name: huntlb-fleet-key
  secret:
    secretName: {{ include "huntlb.secret" . }}
    # Owner and group read; the group is the pod's fsGroup (the kubelet adds
    # group read whatever this says), so the non-root agent reads it.
    defaultMode: 0440
    items: [{key: {{ .Values.fleetKey.secretKey }}, path: fleet.key}]
{{- end -}}

{{/* Seconds the pod has after SIGTERM: the agent's whole drain and a margin. */}}
{{- define "huntlb.grace" -}}
{{- add (div .Values.agent.drainTimeoutMs 1000) .Values.agent.terminationSlackSeconds -}}
{{- end -}}
