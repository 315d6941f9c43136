// sevents on Azure: the Event Hubs transport and the blob container that holds ingest checkpoints.
//
// Least privilege, all through Microsoft Entra ID (managed identities):
//   - one user-assigned identity shared by every collector (attach it to each VM, scale set or AKS node pool,
//     or federate it with the collector's Kubernetes service account): "Azure Event Hubs Data Sender" on the
//     event hub only. One role assignment for the whole fleet: a subscription allows 4,000 of them;
//   - the ingest identity: "Azure Event Hubs Data Receiver" on the event hub only, and
//     "Storage Blob Data Contributor" on the checkpoint container only;
//   - the reconciler's identity (`sevents-ingest reconcile`, a user-assigned identity of its own): the built-in
//     "Reader" on each subscription it reads, nothing else (module subscription-reader.bicep at subscription scope);
//   - centralScheduledEvents (off by default): an Event Grid system topic for Microsoft's central Scheduled Events
//     feed of this subscription, delivering ScheduledEventEmitted to an event hub of its own (feedEventHubName:
//     Event Grid sends under no VM's partition key, so its events cannot share the collectors' hub) with the
//     topic's own (system-assigned) identity, which has "Azure Event Hubs Data Sender" on that hub only; the
//     ingest identity has "Azure Event Hubs Data Receiver" on it.
// Shared keys are off unless allowSasFallback is true; then one Send-only SAS rule exists on the hub
// for collectors that cannot use a managed identity (its key is read with listKeys, never output here).

targetScope = 'resourceGroup'

@description('Azure region of every resource.')
param location string = resourceGroup().location

@description('Event Hubs namespace name (globally unique; becomes <name>.servicebus.windows.net).')
@minLength(6)
@maxLength(50)
param namespaceName string

@description('Event hub that carries the collectors\' records.')
param eventHubName string = 'scheduled-events'

@description('Partitions: the most ingest workers that can share the hub. Cannot be lowered later.')
@minValue(1)
@maxValue(32)
param partitionCount int = 8

@description('Days Event Hubs keeps events; ingest can fall this far behind (or restart a new consumer group from the start).')
@minValue(1)
@maxValue(7)
param retentionDays int = 7

@description('Throughput units (1 TU = 1 MB/s or 1000 events/s in). Auto-inflate raises it up to maxThroughputUnits.')
@minValue(1)
param throughputUnits int = 1

@maxValue(40)
param maxThroughputUnits int = 4

@description('Consumer group the ingest workers share.')
param consumerGroupName string = 'sevents-ingest'

@description('Storage account for checkpoints (globally unique, 3-24 lower-case letters and digits).')
@minLength(3)
@maxLength(24)
param storageAccountName string

param checkpointContainerName string = 'sevents-checkpoints'

@description('Name of the user-assigned identity every collector uses (its client id is output collectorClientId).')
param collectorIdentityName string = 'sevents-collectors'

@description('AKS: OIDC issuer URL of the cluster (az aks show --query oidcIssuerProfile.issuerUrl); empty: no AKS.')
param aksOidcIssuerUrl string = ''

@description('AKS: namespace and service account of the collector DaemonSet (infra/helm), federated with the identity.')
param aksServiceAccountSubject string = 'system:serviceaccount:sevents:sevents-collector'

@description('Principal (object) id of the managed identity that runs sevents-ingest.')
param ingestPrincipalId string

@description('Keep shared-key (SAS) access as a fallback for collectors without a managed identity.')
param allowSasFallback bool = false

@description('Name of the user-assigned identity sevents-ingest reconcile runs as (its client id is output reconcilerClientId).')
param reconcilerIdentityName string = 'sevents-reconciler'

@description('Subscriptions the reconciler reads through Azure Resource Graph: it gets Reader on each (default: this one).')
param reconcileSubscriptionIds array = [
  subscription().subscriptionId
]

@description('Deliver Microsoft\'s central Scheduled Events feed (preview, opt-in per VM or set) of this subscription to the event hub through an Event Grid system topic. One such topic per subscription.')
param centralScheduledEvents bool = false

@description('Event hub the central Scheduled Events feed is delivered to (centralScheduledEvents only; the ingest setting feed_eventhub).')
param feedEventHubName string = 'scheduled-events-feed'

@description('Name of the Event Grid system topic of the central Scheduled Events feed (centralScheduledEvents only).')
param scheduledEventsTopicName string = 'sevents-maintenance-resources'

@description('Schema Event Grid delivers the feed in (the ingest reads both).')
@allowed([
  'EventGridSchema'
  'CloudEventSchemaV1_0'
])
param scheduledEventsSchema string = 'EventGridSchema'

// Built-in role definition ids (the same in every tenant).
var roleEventHubsDataSender = '2b629674-e913-4c01-ae53-ef4638d8f975'
var roleEventHubsDataReceiver = 'a638d3c7-ab3a-418d-83e6-5f17a39d4fde'
var roleStorageBlobDataContributor = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'

// The central Scheduled Events feed: its system topic type and the one event type the ingest reads.
var maintenanceResourcesTopicType = 'Microsoft.ResourceNotifications.MaintenanceResources'
var scheduledEventEmitted = 'Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted'

resource namespace 'Microsoft.EventHub/namespaces@2024-01-01' = {
  name: namespaceName
  location: location
  sku: {
    name: 'Standard' // 1 MB events and consumer groups; Basic allows neither the size nor more than one group
    tier: 'Standard'
    capacity: throughputUnits
  }
  properties: {
    disableLocalAuth: !allowSasFallback
    minimumTlsVersion: '1.2'
    isAutoInflateEnabled: maxThroughputUnits > throughputUnits
    maximumThroughputUnits: maxThroughputUnits > throughputUnits ? maxThroughputUnits : 0
  }
}

resource hub 'Microsoft.EventHub/namespaces/eventhubs@2024-01-01' = {
  parent: namespace
  name: eventHubName
  properties: {
    partitionCount: partitionCount
    messageRetentionInDays: retentionDays
  }
}

resource consumerGroup 'Microsoft.EventHub/namespaces/eventhubs/consumergroups@2024-01-01' = {
  parent: hub
  name: consumerGroupName
  properties: {
    userMetadata: 'sevents ingest workers (blob checkpoints)'
  }
}

resource collectorSasRule 'Microsoft.EventHub/namespaces/eventhubs/authorizationRules@2024-01-01' = if (allowSasFallback) {
  parent: hub
  name: 'collectors-send'
  properties: {
    rights: [
      'Send'
    ]
  }
}

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: storageAccountName
  location: location
  kind: 'StorageV2'
  sku: {
    name: 'Standard_LRS' // checkpoints are small and rebuildable: at worst a partition is read again
  }
  properties: {
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: storage
  name: 'default'
}

resource checkpointContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: checkpointContainerName
  properties: {
    publicAccess: 'None'
  }
}

resource collectorIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: collectorIdentityName
  location: location
}

// Workload identity: pods of the collector's service account exchange their token for this identity's.
resource collectorFederation 'Microsoft.ManagedIdentity/userAssignedIdentities/federatedIdentityCredentials@2023-01-31' = if (!empty(aksOidcIssuerUrl)) {
  parent: collectorIdentity
  name: 'aks-sevents-collector'
  properties: {
    issuer: aksOidcIssuerUrl
    subject: aksServiceAccountSubject
    audiences: [
      'api://AzureADTokenExchange'
    ]
  }
}

resource collectorsSend 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: hub
  name: guid(hub.id, collectorIdentity.id, roleEventHubsDataSender)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleEventHubsDataSender)
    principalId: collectorIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource ingestReceive 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: hub
  name: guid(hub.id, ingestPrincipalId, roleEventHubsDataReceiver)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleEventHubsDataReceiver)
    principalId: ingestPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource ingestCheckpoints 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: checkpointContainer
  name: guid(checkpointContainer.id, ingestPrincipalId, roleStorageBlobDataContributor)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleStorageBlobDataContributor)
    principalId: ingestPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// The reconciler reads Azure Resource Graph and nothing else: an identity of its own (the ingest's has data roles
// on the hub and the checkpoints that reading the inventory does not need), Reader on each subscription it reads.
resource reconcilerIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: reconcilerIdentityName
  location: location
}

// Reader is assigned at subscription scope, which a resource group deployment reaches through a module.
module reconcilerReader 'subscription-reader.bicep' = [
  for subscriptionId in reconcileSubscriptionIds: {
    name: 'sevents-reconciler-reader-${uniqueString(subscriptionId, reconcilerIdentityName)}'
    scope: subscription(subscriptionId)
    params: {
      principalId: reconcilerIdentity.properties.principalId
    }
  }
]

// Microsoft's central Scheduled Events feed (issue 27): a hub of its own (the collectors' hub only takes records
// sent under their VM's partition key), a system topic on this subscription's maintenance resources (location
// global, like every subscription-level source) and a subscription delivering ScheduledEventEmitted to the feed's
// hub (scheduledEventsSchema: Event Grid's schema or CloudEvents 1.0). Event Grid authenticates to Event Hubs with
// the topic's system-assigned identity: it exists only with the topic and can only send to the feed's hub.
resource feedHub 'Microsoft.EventHub/namespaces/eventhubs@2024-01-01' = if (centralScheduledEvents) {
  parent: namespace
  name: feedEventHubName
  properties: {
    partitionCount: 2 // one event per maintenance announcement: a trickle next to the collectors' records
    messageRetentionInDays: retentionDays
  }
}

resource feedConsumerGroup 'Microsoft.EventHub/namespaces/eventhubs/consumergroups@2024-01-01' = if (centralScheduledEvents) {
  parent: feedHub
  name: consumerGroupName
  properties: {
    userMetadata: 'sevents ingest (the central Scheduled Events feed; blob checkpoints)'
  }
}

resource ingestReceiveFeed 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (centralScheduledEvents) {
  scope: feedHub
  name: guid(feedHub.id, ingestPrincipalId, roleEventHubsDataReceiver)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleEventHubsDataReceiver)
    principalId: ingestPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource maintenanceTopic 'Microsoft.EventGrid/systemTopics@2022-06-15' = if (centralScheduledEvents) {
  name: scheduledEventsTopicName
  location: 'global'
  identity: {
    type: 'SystemAssigned'
  }
  properties: {
    source: subscription().id
    topicType: maintenanceResourcesTopicType
  }
}

resource maintenanceTopicSend 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (centralScheduledEvents) {
  scope: feedHub
  name: guid(feedHub.id, maintenanceTopic.id, roleEventHubsDataSender)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleEventHubsDataSender)
    principalId: maintenanceTopic.identity.principalId
    principalType: 'ServicePrincipal'
  }
}

resource scheduledEventsToHub 'Microsoft.EventGrid/systemTopics/eventSubscriptions@2022-06-15' = if (centralScheduledEvents) {
  parent: maintenanceTopic
  name: 'sevents-scheduled-events'
  dependsOn: [
    maintenanceTopicSend // delivery needs the role first
  ]
  properties: {
    eventDeliverySchema: scheduledEventsSchema
    filter: {
      includedEventTypes: [
        scheduledEventEmitted
      ]
    }
    deliveryWithResourceIdentity: {
      identity: {
        type: 'SystemAssigned'
      }
      destination: {
        endpointType: 'EventHub'
        properties: {
          resourceId: feedHub.id
        }
      }
    }
    retryPolicy: {
      maxDeliveryAttempts: 30
      eventTimeToLiveInMinutes: 1440
    }
  }
}

@description('Collector and ingest setting eventhubs_namespace.')
output eventhubsNamespace string = '${namespace.name}.servicebus.windows.net'

@description('Collector and ingest setting eventhubs_name.')
output eventhubsName string = hub.name

@description('Ingest setting eventhubs_consumer_group (sevents-ingest, the ingest\'s default).')
output eventhubsConsumerGroup string = consumerGroup.name

@description('Ingest setting checkpoint_blob_url.')
output checkpointBlobUrl string = storage.properties.primaryEndpoints.blob

@description('Ingest setting checkpoint_container.')
output checkpointContainer string = checkpointContainer.name

@description('AZURE_CLIENT_ID of the collectors (managed identity on VMs; workloadIdentity.clientId of the Helm chart).')
output collectorClientId string = collectorIdentity.properties.clientId

@description('Resource id of the collectors\' identity: attach it to VMs, scale sets or node pools (identity.userAssignedIdentities).')
output collectorIdentityId string = collectorIdentity.id

@description('Ingest setting reconcile_client_id (AZURE_CLIENT_ID of sevents-ingest reconcile; workload identity client id on AKS).')
output reconcilerClientId string = reconcilerIdentity.properties.clientId

@description('Resource id of the reconciler\'s identity: attach it to the VM, container or pod that runs sevents-ingest reconcile.')
output reconcilerIdentityId string = reconcilerIdentity.id

@description('Ingest setting feed_eventhub: the hub of the central Scheduled Events feed (empty unless centralScheduledEvents).')
output feedEventhub string = centralScheduledEvents ? feedEventHubName : ''

@description('Event Grid system topic of the central Scheduled Events feed (empty unless centralScheduledEvents).')
output scheduledEventsTopic string = centralScheduledEvents ? scheduledEventsTopicName : ''
